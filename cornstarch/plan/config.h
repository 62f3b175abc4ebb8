// The run configuration: YAML mapped one-to-one onto these structs. Each struct lists its fields once, in
// `Fields(f)`, with the key, the member and a one-line doc; parsing, unknown-key detection, `--set` overrides,
// printing and the configuration reference are all driven by that list. The member initialisers are the defaults.
// All semantic checks live in Validate() (config.cc). Fields with a fixed set of values are enums: the parser turns
// the YAML's name into the value once, so no code past it compares strings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cornstarch {

enum class EncoderType { kVision, kAudio };
enum class VisionStyle { kSiglip, kClip };
enum class VisionPositions { kInterpolate, kRope2d };
enum class Activation { kGelu, kGeluTanh, kQuickGelu };
enum class ProjectorType { kLinear, kMlp };
enum class PlanMode { kFrozenAware, kUniform, kColocated, kFrozenUnaware };
enum class CostSource { kProfile, kFlops };
enum class CpSplit { kBalanced, kZigzag, kContiguous };
enum class ScheduleKind { k1F1B, kInterleaved };
enum class LrDecay { kCosine, kLinear, kConstant };
enum class DeviceType { kCpu, kCuda };
enum class Precision { kAuto, kFp32, kBf16 };
enum class FloatType { kFp32, kBf16 };
enum class DataType { kSynthetic, kLlava };
enum class ImagePreset { kClip, kSiglip };
enum class BadSamplePolicy { kError, kSkip };
enum class ChatTemplate { kLlavaV1, kLlama2, kLlama3, kChatml, kVicuna, kPlain };
enum class LogLevel { kTrace, kDebug, kInfo, kWarn, kError };

// The YAML names of an enum's values, in declaration order. Specialised once per enum below; the config machinery
// (parse, print, reference) and NameOf read it.
template <class E>
struct Choices;

#define CS_CHOICES(E, ...)                                \
  template <>                                             \
  struct Choices<E> {                                     \
    static constexpr const char* names[] = {__VA_ARGS__}; \
  }
CS_CHOICES(EncoderType, "vision", "audio");
CS_CHOICES(VisionStyle, "siglip", "clip");
CS_CHOICES(VisionPositions, "interpolate", "rope_2d");
CS_CHOICES(Activation, "gelu", "gelu_tanh", "quick_gelu");
CS_CHOICES(ProjectorType, "linear", "mlp");
CS_CHOICES(PlanMode, "frozen_aware", "uniform", "colocated", "frozen_unaware");
CS_CHOICES(CostSource, "profile", "flops");
CS_CHOICES(CpSplit, "balanced", "zigzag", "contiguous");
CS_CHOICES(ScheduleKind, "1f1b", "interleaved");
CS_CHOICES(LrDecay, "cosine", "linear", "constant");
CS_CHOICES(DeviceType, "cpu", "cuda");
CS_CHOICES(Precision, "auto", "fp32", "bf16");
CS_CHOICES(FloatType, "fp32", "bf16");
CS_CHOICES(DataType, "synthetic", "llava");
CS_CHOICES(ImagePreset, "clip", "siglip");
CS_CHOICES(BadSamplePolicy, "error", "skip");
CS_CHOICES(ChatTemplate, "llava_v1", "llama2", "llama3", "chatml", "vicuna", "plain");
CS_CHOICES(LogLevel, "trace", "debug", "info", "warn", "error");
#undef CS_CHOICES

// The YAML name of `value` ("frozen_aware" for PlanMode::kFrozenAware).
template <class E>
const char* NameOf(E value) {
  return Choices<E>::names[static_cast<size_t>(value)];
}

struct ProjectorConfig {
  ProjectorType type = ProjectorType::kMlp;
  bool frozen = false;

  template <class F>
  void Fields(F&& f) {
    f("type", type, "Projector from encoder to LLM width: 'linear', or 'mlp' (Linear, GELU, Linear).");
    f("frozen", frozen, "Freeze the projector: no gradients, no optimizer state.");
  }
};

// One modality encoder with its projector. `name` is its key under model.encoders and names its layers
// (encoder.<name>.block.3) and placeholder tokens.
struct EncoderConfig {
  std::string name;
  EncoderType type = EncoderType::kVision;
  int64_t hidden_size = 64;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t intermediate_size = 256;
  double layer_norm_eps = 1e-5;
  Activation hidden_act = Activation::kGelu;
  VisionStyle vision_style = VisionStyle::kSiglip;
  int64_t feature_layer = -1;
  bool post_norm = true;
  int64_t image_size = 32;
  int64_t patch_size = 8;
  int64_t num_channels = 3;
  bool dynamic_resolution = false;
  int64_t max_patches = 0;
  VisionPositions dynamic_positions = VisionPositions::kInterpolate;
  int64_t anyres_max_tiles = 0;
  int64_t num_mel_bins = 16;
  int64_t num_frames = 32;
  bool frozen = false;
  bool tp = true;
  std::string weights;
  std::string weights_prefix;
  ProjectorConfig projector;

  template <class F>
  void Fields(F&& f) {
    f("type", type, "Encoder architecture: 'vision' (patch embedding + ViT blocks) or 'audio' (two 1-D convs + "
                    "Whisper-encoder blocks).");
    f("hidden_size", hidden_size, "Width of the encoder's transformer blocks.");
    f("num_layers", num_layers, "Number of transformer blocks.");
    f("num_heads", num_heads, "Attention heads; must divide hidden_size.");
    f("intermediate_size", intermediate_size, "Hidden width of each block's GELU MLP.");
    f("layer_norm_eps", layer_norm_eps, "Epsilon of the encoder's LayerNorms.");
    f("hidden_act", hidden_act, "Activation of the blocks' MLPs: 'gelu' (exact, as Whisper), 'gelu_tanh' (the "
                                "tanh approximation, SigLIP's gelu_pytorch_tanh) or 'quick_gelu' (x * sigmoid(1.702 "
                                "x), OpenAI's CLIP).");
    f("vision_style", vision_style, "vision: 'siglip' (patch embedding with bias, position per patch) or 'clip' "
                                    "(class token in front of the patches, patch embedding without bias, "
                                    "pre_layrnorm after the embeddings; the class token is dropped before the "
                                    "projector, as LLaVA does).");
    f("feature_layer", feature_layer, "Block whose output feeds the projector, counted from the end as Hugging "
                                      "Face's vision_feature_layer: -1 the last of num_layers, -2 the one before "
                                      "(LLaVA-1.5). Later blocks are not built or run; their checkpoint tensors are "
                                      "known but not loaded.");
    f("post_norm", post_norm, "Apply the tower's final LayerNorm (SigLIP's post_layernorm, Whisper's layer_norm) "
                              "to the features, as its last_hidden_state does; false takes the blocks' output as "
                              "hidden_states[feature_layer] does. Must be false for 'clip', whose post_layernorm "
                              "is for the pooled class token only.");
    f("image_size", image_size, "vision: square input resolution in pixels; a multiple of patch_size.");
    f("patch_size", patch_size, "vision: square patch side in pixels; one token per patch.");
    f("num_channels", num_channels, "vision: input channels.");
    f("dynamic_resolution", dynamic_resolution,
      "vision: take each image at its own size instead of resizing it to image_size: each side rounded to the "
      "patch grid, scaled down keeping the aspect ratio when it has more than max_patches patches, so images "
      "differ in token count (also in the LLM sequence). A microbatch's images run packed into one sequence with "
      "attention isolated per image. vision_style 'siglip' only.");
    f("max_patches", max_patches, "vision, dynamic_resolution: the most patches (tokens) one image takes; 0: "
                                  "those of an image_size square.");
    f("anyres_max_tiles", anyres_max_tiles,
      "vision: LLaVA-NeXT-style 'anyres' when above 0: each image becomes a base view (the image preprocessed to "
      "image_size as data.image_preset says) plus tiles of image_size from the grid of rows x cols tiles (rows x "
      "cols <= anyres_max_tiles, 1 x 1 left out) that keeps most of its resolution with the least padding; it is "
      "resized into that grid keeping its aspect ratio and centred on black. Each view is its own image in the "
      "packed tower (attention within a view); the LLM takes the base view's tokens, then the tiles', row by row. "
      "vision_style 'siglip' only; not with dynamic_resolution.");
    f("dynamic_positions", dynamic_positions,
      "vision, dynamic_resolution or anyres: 'interpolate' (the learned table of an image_size square resized "
      "bicubically to each image's patch grid, as Hugging Face's interpolate_pos_encoding; loads SigLIP weights) or "
      "'rope_2d' (no table: rotary positions in every block, the patch row over half the rotary frequencies and the "
      "column over the other half, as Qwen2-VL's vision tower; head size a multiple of 4).");
    f("num_mel_bins", num_mel_bins, "audio: mel bins per input frame.");
    f("num_frames", num_frames, "audio: input frames; even, since the second conv has stride 2.");
    f("frozen", frozen, "Freeze the encoder: no gradients, no optimizer state, and no autograd graph when nothing "
                        "before it trains.");
    f("tp", tp, "With parallel.tp > 1: shard the tower's blocks (heads and MLP width) and its projector over the tp "
                "ranks as the LLM's are; false runs them whole on every tp rank, which is cheaper for a small tower "
                "(no collectives; the planner then does not divide its costs by tp). Sharded, num_heads and "
                "intermediate_size must be multiples of parallel.tp.");
    f("weights", weights, "Hugging Face weights to start from: a SigLIP or CLIP vision tower (vision) or a Whisper "
                          "encoder (audio); a .safetensors file or a directory as for model.llm.weights.");
    f("weights_prefix", weights_prefix, "Prefix of the tower's tensor names in `weights` (e.g. 'vision_tower.').");
    f("projector", projector, "The projector that maps this encoder's features to the LLM's width.");
  }
};

// Decoder LLM of Llama/Qwen2 shape: RMSNorm, RoPE, SwiGLU MLP, grouped-query attention.
struct LlmConfig {
  int64_t vocab_size = 256;
  int64_t hidden_size = 128;
  int64_t num_layers = 4;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t intermediate_size = 352;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-6;
  bool attention_bias = false;
  bool frozen = false;
  std::string weights;
  std::string weights_prefix;

  template <class F>
  void Fields(F&& f) {
    f("vocab_size", vocab_size, "Vocabulary size, special and placeholder tokens included.");
    f("hidden_size", hidden_size, "Model width.");
    f("num_layers", num_layers, "Number of decoder blocks.");
    f("num_heads", num_heads, "Query heads; must divide hidden_size, and head_dim must be even for RoPE.");
    f("num_kv_heads", num_kv_heads, "Key/value heads (grouped-query attention); must divide num_heads.");
    f("intermediate_size", intermediate_size, "Hidden width of the SwiGLU MLP.");
    f("rope_theta", rope_theta, "RoPE base frequency.");
    f("rms_norm_eps", rms_norm_eps, "Epsilon of the RMSNorms.");
    f("attention_bias", attention_bias, "Biases on the q/k/v projections (Qwen2: true; Llama: false).");
    f("frozen", frozen, "Freeze the LLM (embeddings, blocks, head).");
    f("weights", weights, "Hugging Face Llama/Qwen2 weights to start from: a .safetensors file, or a directory with "
                          "model.safetensors or a sharded model.safetensors.index.json; empty: random init.");
    f("weights_prefix", weights_prefix, "Prefix of the LLM's tensor names in `weights` (e.g. 'language_model.' in "
                                        "a LLaVA checkpoint).");
  }
};

struct ModelConfig {
  LlmConfig llm;
  std::vector<EncoderConfig> encoders;
  double init_std = 0.02;
  bool activation_checkpointing = false;

  template <class F>
  void Fields(F&& f) {
    f("llm", llm, "The decoder LLM.");
    f("encoders", encoders, "Modality encoders by name, in order; each feeds its projected features to the LLM.");
    f("init_std", init_std, "Standard deviation of the normal init of linear and embedding weights.");
    f("activation_checkpointing", activation_checkpointing,
      "Keep only each transformer block's input for backward and run its forward again there (encoders and "
      "LLM): less activation memory for about one more forward of the blocks; gradients are unchanged, MFU "
      "does not count the recomputation.");
  }
};

// Degrees of parallelism; their product must equal the number of ranks.
struct ParallelConfig {
  int64_t pp = 1;
  int64_t cp = 1;
  int64_t dp = 1;
  int64_t tp = 1;
  bool sequence_parallel = false;
  PlanMode pipeline = PlanMode::kFrozenAware;
  CostSource pipeline_costs = CostSource::kProfile;
  CpSplit cp_split = CpSplit::kBalanced;
  int64_t cp_block = 128;
  double timeout_seconds = 300.0;
  ScheduleKind schedule = ScheduleKind::k1F1B;
  int64_t virtual_stages = 1;
  std::string schedule_file;
  bool auto_layout = false;
  bool overlap_grad_sync = true;
  double grad_bucket_mib = 25;
  FloatType grad_reduce_dtype = FloatType::kFp32;

  template <class F>
  void Fields(F&& f) {
    f("pp", pp, "Pipeline-parallel degree. 1 means disabled.");
    f("cp", cp, "Context-parallel degree. 1 means disabled.");
    f("dp", dp, "Data-parallel degree. 1 means disabled.");
    f("tp", tp, "Tensor-parallel degree (Megatron-style, the innermost mesh axis): the LLM's attention heads, "
                "SwiGLU width and vocabulary are split over tp ranks, which must divide num_heads, num_kv_heads, "
                "intermediate_size and vocab_size; encoders and projectors are replicated. 1 means disabled.");
    f("sequence_parallel", sequence_parallel,
      "With tp > 1: the LLM's residual stream outside its tensor-parallel regions (norms, residual adds, the "
      "messages between pipeline stages) is cut along the sequence over the tp ranks, an all-gather before each "
      "column-parallel layer and a reduce-scatter after each row-parallel one in place of the all-reduces, so "
      "those activations take 1/tp of the memory (Megatron-LM's sequence parallelism).");
    f("pipeline", pipeline, "Placement of layers on the pp stages: frozen_aware (each encoder on stages of its own, "
                            "cut by frozen-aware cost), uniform (the same, equal layer counts), colocated (every "
                            "encoder on the first LLM stage, as LLM-centric trainers do) or frozen_unaware (the "
                            "frozen-aware search on costs blind to freezing, backward = 2 x forward everywhere: a "
                            "baseline).");
    f("pipeline_costs", pipeline_costs, "Layer costs the placement is planned on when pp > 1: profile (rank 0 "
                                        "times every layer's forward on its device before training and shares "
                                        "the result) or flops (the FLOP estimate: no startup cost, but blind to "
                                        "how fast each kind of layer runs).");
    f("cp_split", cp_split, "How sequences are split over the cp ranks: balanced (equal attention work under the "
                            "bitfield mask), zigzag (balanced for causal text only) or contiguous.");
    f("cp_block", cp_block, "Tokens per context-parallel block; data.seq_len must be a multiple of cp x cp_block. "
                            "Multiples of 64 (the attention kernel's tile) avoid recomputation.");
    f("auto", auto_layout, "Choose tp, pp, cp, dp, the micro-batch size, recomputation, sequence parallelism and "
                           "the towers' tp for the job's ranks by the layout cost model on the cluster: section "
                           "(what cornstarch-plan --auto ranks first); the values given here are ignored.");
    f("schedule", schedule, "Pipeline schedule: 1f1b, or interleaved (Megatron-style interleaved 1F1B: each LLM "
                            "pipeline rank holds virtual_stages non-adjacent pieces of the LLM, a smaller bubble "
                            "for more messages; encoder stages stay plain). Interleaving needs at least two LLM "
                            "ranks and microbatches per step that split into rounds of about pp of them.");
    f("virtual_stages", virtual_stages, "LLM stages per pipeline rank under schedule: interleaved (>= 2); 1 with "
                                        "1f1b.");
    f("schedule_file", schedule_file, "A pipeline schedule written by hand instead of the generated one: one line "
                                      "per pipeline rank, 'rank 0: 0F0 0F1 0B0 ...' (actions name their stage; "
                                      "configs/schedules/ has examples; '#' starts a comment). Compute-only files "
                                      "get their sends and receives added; the file must fit the planned stages "
                                      "and microbatches. Empty: generated.");
    f("timeout_seconds", timeout_seconds, "A communication that does not complete within this many seconds "
                                          "reports the stuck rank and operation and aborts the job.");
    f("overlap_grad_sync", overlap_grad_sync, "Sum gradient buckets over dp while the last backward still runs "
                                              "(each bucket as soon as its gradients are complete). The sums are "
                                              "bitwise those of synchronising after backward.");
    f("grad_bucket_mib", grad_bucket_mib, "Gradients are summed over dp in buckets of at most this many MiB (a "
                                          "larger parameter gets a bucket of its own): fewer, larger calls vs. "
                                          "an earlier start under backward.");
    f("grad_reduce_dtype", grad_reduce_dtype, "'fp32', or 'bf16': gradient buckets travel and are summed over dp "
                                              "in bf16 (half the bytes), then widened back into the fp32 gradients "
                                              "the optimizer reads.");
  }
};

struct OptimizerConfig {
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 20;
  LrDecay decay = LrDecay::kCosine;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.01;
  bool shard = false;

  template <class F>
  void Fields(F&& f) {
    f("lr", lr, "Peak learning rate, reached at the end of warm-up.");
    f("min_lr", min_lr, "Learning rate at the last step (cosine/linear decay).");
    f("warmup_steps", warmup_steps, "Steps of linear warm-up from 0 to lr.");
    f("decay", decay, "Decay after warm-up: 'cosine', 'linear' or 'constant'.");
    f("beta1", beta1, "AdamW first-moment decay.");
    f("beta2", beta2, "AdamW second-moment decay.");
    f("eps", eps, "AdamW denominator epsilon.");
    f("weight_decay", weight_decay, "Decoupled weight decay, applied to matrices only (not norms or biases).");
    f("shard", shard, "Shard the AdamW state over the dp replicas (ZeRO-1): gradients are reduce-scattered, each "
                      "replica updates its 1/dp of every gradient bucket, and the updated slices are all-gathered. "
                      "Optimizer memory per rank falls by ~dp; no effect when dp = 1.");
  }
};

struct TrainConfig {
  int64_t steps = 200;
  int64_t global_batch_size = 16;
  int64_t micro_batch_size = 8;
  int64_t seed = 0;
  double grad_clip_norm = 1.0;
  int64_t num_threads = 0;
  DeviceType device = DeviceType::kCpu;
  Precision precision = Precision::kAuto;

  template <class F>
  void Fields(F&& f) {
    f("steps", steps, "Optimizer steps to run.");
    f("global_batch_size", global_batch_size, "Sequences per optimizer step, over all data-parallel ranks.");
    f("micro_batch_size", micro_batch_size, "Sequences per forward/backward; the rest is gradient accumulation.");
    f("seed", seed, "Seed of weight init and data; equal seeds give identical runs.");
    f("grad_clip_norm", grad_clip_norm, "Clip the global gradient norm to this value; 0 disables clipping.");
    f("num_threads", num_threads, "Intra-op CPU threads per rank; 0 shares the node's cores among its ranks.");
    f("device", device, "'cpu', or 'cuda': each rank trains on GPU local_rank (needs a CUDA build of LibTorch), "
                        "dp gradients summed and pipeline activations exchanged GPU to GPU over NCCL; "
                        "context parallelism runs on 'cpu' only so far.");
    f("precision", precision, "'fp32', 'bf16' (autocast over the forward: matrix products in bf16, norms, "
                              "softmax and the loss in fp32; fp32 master weights, gradients and optimizer state; "
                              "pipeline activations and their gradients sent in bf16) or 'auto': bf16 on 'cuda', "
                              "fp32 on 'cpu'. fp32 on 'cuda' uses TF32 tensor cores for its matrix products.");
  }
};

// train.precision with 'auto' resolved by train.device: kFp32 or kBf16.
Precision EffectivePrecision(const TrainConfig& train);

// One dataset of data.mix: its files and how often it is drawn from.
struct DataSource {
  std::vector<std::string> path;
  double weight = 1.0;
  std::string media_dir;

  template <class F>
  void Fields(F&& f) {
    f("path", path, "Files of this dataset, as data.path.");
    f("weight", weight, "Relative share of the samples drawn from this dataset.");
    f("media_dir", media_dir, "As data.media_dir, for this dataset's files.");
  }
};

// Deterministic synthetic multimodal data: each sample shows one instance per encoder, drawn around a random
// class prototype, and its answer tokens name those classes, so only a model that reads the modalities can
// predict them.
struct DataConfig {
  DataType type = DataType::kSynthetic;
  int64_t seq_len = 64;
  int64_t num_classes = 8;
  double noise_std = 1.0;
  int64_t min_prompt_tokens = 1;
  int64_t max_prompt_tokens = 8;
  bool zero_modality_inputs = false;
  std::vector<std::string> path;
  std::vector<DataSource> mix;
  int64_t streams = 0;
  std::string media_dir;
  std::string tokenizer;
  ChatTemplate chat_template = ChatTemplate::kLlavaV1;
  std::string system_prompt;
  std::string image_token = "<image>";
  std::string audio_token = "<audio>";
  ImagePreset image_preset = ImagePreset::kClip;
  std::vector<double> image_mean;
  std::vector<double> image_std;
  bool pack = true;
  bool shuffle = true;
  BadSamplePolicy on_bad_sample = BadSamplePolicy::kError;
  int64_t prefetch = 4;
  int64_t workers = 1;

  template <class F>
  void Fields(F&& f) {
    f("type", type, "Dataset: 'synthetic' (generated, for tests and benchmarks) or 'llava' (conversations with "
                    "images and audio from a JSON/JSONL file).");
    f("seq_len", seq_len, "Tokens per sequence, modality placeholders included; shorter samples are padded.");
    f("num_classes", num_classes, "synthetic: classes per modality; each encoder input is a noisy class prototype.");
    f("noise_std", noise_std, "synthetic: standard deviation of the noise around the class prototype.");
    f("min_prompt_tokens", min_prompt_tokens, "synthetic: fewest random prompt tokens before the modalities.");
    f("max_prompt_tokens", max_prompt_tokens, "synthetic: most random prompt tokens before the modalities.");
    f("zero_modality_inputs", zero_modality_inputs,
      "synthetic: feed zeros instead of the images/audio (an ablation: the loss must then stay high).");
    f("path", path, "llava: the dataset's files, one or a list, each a path or a glob ('shards/*.tar'): .json "
                    "(an array of samples, read whole when the stream reaches it), .jsonl (one sample per line) "
                    "or WebDataset .tar shards (per key a .json sample and its .jpg/.png/.wav media). A sample is "
                    "{\"id\", \"image\": path or [paths], \"audio\": path or [paths], \"conversations\": "
                    "[{\"from\": \"human\"|\"gpt\"|\"system\", \"value\": text}]}. Files are read as streams, "
                    "sample by sample, never all at start.");
    f("mix", mix, "llava: several datasets instead of data.path, a list of {path, weight, media_dir}: every "
                  "sample of a stream is drawn from one of them with probability proportional to its weight.");
    f("streams", streams, "llava: independent sample streams the files are dealt to (round-robin; a file shared "
                          "by several streams is split by sample). Each dp rank reads only its own streams, so "
                          "must be a multiple of the dp degree and divide train.global_batch_size; the data "
                          "order depends on this number only, never on the layout. 0: one per dp rank.");
    f("media_dir", media_dir, "llava: directory that relative image and audio paths start from; empty: the "
                              "directory of `path`.");
    f("tokenizer", tokenizer, "llava: the tokenizer: a Hugging Face tokenizer.json (any .json file; BOS/EOS from "
                              "tokenizer_config.json beside it) or a sentencepiece BPE model (tokenizer.model).");
    f("chat_template", chat_template, "llava: how turns become tokens: 'llava_v1' (USER:/ASSISTANT:, EOS after "
                                      "each answer), 'vicuna' (the same with Vicuna's system prompt), 'llama2' "
                                      "([INST] blocks), 'llama3' (header blocks, <|eot_id|>), 'chatml' "
                                      "(<|im_start|> blocks) or 'plain' (media then the caption: LLaVA "
                                      "pretraining). Loss falls on the assistant's answers and their end token.");
    f("system_prompt", system_prompt, "llava: the system prompt of samples that have no system turn; empty: none "
                                      "(vicuna: Vicuna's own).");
    f("image_token", image_token, "llava: placeholder in the text where an image goes; replaced by the vision "
                                  "encoder's token count of placeholder ids. An image with no placeholder in the "
                                  "text goes before the first human turn.");
    f("audio_token", audio_token, "llava: placeholder for an audio clip, as image_token.");
    f("image_preset", image_preset, "llava: image preprocessing: 'clip' (bicubic resize of the short side, centre "
                                    "crop, CLIP mean/std) or 'siglip' (bicubic resize to the square, mean = std = "
                                    "0.5).");
    f("image_mean", image_mean, "llava: per-channel mean [r, g, b] after rescaling to [0, 1]; empty: the preset's.");
    f("image_std", image_std, "llava: per-channel standard deviation [r, g, b]; empty: the preset's.");
    f("pack", pack, "llava: pack several samples into each sequence (their tokens never attend to each other and "
                    "positions restart per sample); false: one sample per sequence.");
    f("shuffle", shuffle, "llava: shuffle the samples every epoch (from train.seed and the epoch number).");
    f("on_bad_sample", on_bad_sample, "llava: a sample with a missing or undecodable file, placeholders that do "
                                      "not match its media, or more tokens than seq_len: 'error' stops with the "
                                      "file and sample index, 'skip' leaves it out and counts it in the log.");
    f("prefetch", prefetch, "Microbatches prepared ahead on background threads (decoding, preprocessing); 0 "
                            "prepares each one when the step needs it.");
    f("workers", workers, "Background threads preparing microbatches (with prefetch > 0).");
  }
};

struct LoggingConfig {
  LogLevel level = LogLevel::kInfo;
  int64_t interval = 10;
  std::string metrics_path = "runs/metrics.jsonl";
  std::string tensorboard_dir;
  double peak_tflops = 0.0;
  std::string trace_path;
  int64_t trace_first_step = 2;
  int64_t trace_last_step = 3;

  template <class F>
  void Fields(F&& f) {
    f("level", level, "Log level: trace, debug, info, warn or error.");
    f("interval", interval, "Print the per-step line every this many steps (and at the first and last step).");
    f("metrics_path", metrics_path, "Metrics file, one record per step: JSONL, or CSV with a header row when the "
                                    "name ends in .csv; empty disables it.");
    f("tensorboard_dir", tensorboard_dir, "Directory for a TensorBoard event file of the per-step scalars (loss, lr, "
                                          "grad norm, tokens/s, step time, MFU, memory), written by rank 0; empty "
                                          "disables it.");
    f("peak_tflops", peak_tflops, "Peak TFLOP/s of one rank for MFU (e.g. 989 for H100 bf16, 312 for A100 bf16); "
                                  "0: on cuda the GPU's dense bf16 peak from a table of common GPUs (MFU 0 with a "
                                  "warning if the GPU is not listed), on cpu this CPU's fp32 GEMM rate measured at "
                                  "start-up.");
    f("trace_path", trace_path, "Chrome-trace/Perfetto JSON of the measured execution of every rank, written by "
                                "rank 0 at the end (with an SVG of the measured vs planned pipeline next to it); "
                                "empty disables tracing.");
    f("trace_first_step", trace_first_step, "First step to trace (the first one includes warm-up effects).");
    f("trace_last_step", trace_last_step, "Last step to trace.");
  }
};

// Validation: forward passes only, under the training layout, over batches of their own data.
struct EvalConfig {
  DataConfig data;
  int64_t interval = 0;
  int64_t steps = 4;
  bool at_end = false;

  bool enabled() const { return interval > 0 || at_end; }

  template <class F>
  void Fields(F&& f) {
    f("data", data, "Validation data, in the same formats as `data` (its own path). Read in a fixed order (never "
                    "shuffled), so evaluations of the same weights agree exactly; synthetic samples are drawn "
                    "from a stream of their own, never seen in training.");
    f("interval", interval, "Evaluate after every this many steps; 0: only as at_end says.");
    f("steps", steps, "Batches per evaluation, each of train.global_batch_size sequences.");
    f("at_end", at_end, "Evaluate after the last step.");
  }
};

struct CheckpointConfig {
  std::string dir;
  int64_t interval = 0;
  int64_t keep_last = 2;
  std::string resume;
  std::string export_hf;
  FloatType export_dtype = FloatType::kFp32;

  template <class F>
  void Fields(F&& f) {
    f("dir", dir, "Directory of the run's checkpoints (one step-NNNNNNNN directory each); empty disables them.");
    f("interval", interval, "Save every this many steps; 0 saves only at the end. The last step always saves.");
    f("keep_last", keep_last, "Complete checkpoints to keep; older ones are deleted after a save.");
    f("resume", resume, "Resume from 'latest' (the newest complete checkpoint in dir) or a checkpoint directory; "
                        "empty starts fresh. The run continues bitwise identically on the same layout.");
    f("export_hf", export_hf, "After the last step, write the model here in Hugging Face layout (safetensors "
                              "shards and model.safetensors.index.json); empty: no export.");
    f("export_dtype", export_dtype, "dtype of the exported tensors: 'fp32' (the checkpoint's) or 'bf16'.");
  }
};

// The machines a layout is planned for (cornstarch-plan --auto, parallel.auto): what the cost model of a whole
// layout (plan/layout_search.h) needs. The defaults describe one node of 8 H100s.
struct ClusterConfig {
  int64_t gpus_per_node = 8;
  double tflops = 989;            // peak per rank, in the training precision (H100 bf16 dense)
  double efficiency = 0.5;        // the share of the peak a layer's GEMMs reach
  double memory_gib = 80;         // per rank
  double intra_node_gbps = 200;   // GB/s a collective moves per rank inside a node (NVLink)
  double inter_node_gbps = 25;    // GB/s between nodes (a 200 Gb/s NIC per rank)
  double latency_us = 10;         // per collective or message
  double layer_overhead_us = 0;   // per layer and microbatch forward, whatever the shard or micro-batch size
  int64_t cores_per_node = 0;     // CPU runs with more ranks than cores: the cores they share; 0: a device each
  bool measure = true;            // CPU runs with parallel.auto: measure this machine instead of the numbers given

  template <class F>
  void Fields(F&& f) {
    f("gpus_per_node", gpus_per_node, "Ranks per node; tp groups never span nodes, and groups inside a node use the "
                                      "intra-node bandwidth.");
    f("tflops", tflops, "Peak TFLOP/s of one rank in the training precision (989: H100 bf16 dense; 1979 is its "
                        "sparse figure, not reached by training).");
    f("efficiency", efficiency, "Share of the peak that the layers' matrix products reach, in (0, 1].");
    f("memory_gib", memory_gib, "Memory per rank in GiB; layouts whose estimate exceeds it are rejected.");
    f("intra_node_gbps", intra_node_gbps, "Bandwidth in GB/s each rank gets in collectives inside a node.");
    f("inter_node_gbps", inter_node_gbps, "Bandwidth in GB/s each rank gets between nodes.");
    f("latency_us", latency_us, "Fixed cost of one collective or pipeline message, in microseconds.");
    f("layer_overhead_us", layer_overhead_us, "Fixed cost of one layer's forward on one microbatch, in microseconds "
                                              "(op dispatch, launches, passes too small to reach the GEMM rate); it "
                                              "does not shrink under tp or cp. Backward counts it twice. bench/"
                                              "layout_bench fits it with the efficiency from two micro-batch sizes.");
    f("cores_per_node", cores_per_node, "CPU runs with more ranks per node than cores: the cores they share (0: "
                                        "every rank has a device of its own). cluster.tflops is then one rank's "
                                        "rate while all compute, and a rank idle in the pipeline's bubble leaves its "
                                        "share to the ranks computing.");
    f("measure", measure, "CPU runs with parallel.auto: measure this machine at start (the slowest rank's fp32 "
                          "GEMM rate with every rank running, an all-reduce's bandwidth and latency, ranks and cores "
                          "per node) and plan on that in place of tflops, the bandwidths, latency_us, gpus_per_node "
                          "and cores_per_node; efficiency and layer_overhead_us stay as given. false: plan on the "
                          "numbers given.");
  }
};

struct Config {
  ModelConfig model;
  ParallelConfig parallel;
  TrainConfig train;
  OptimizerConfig optimizer;
  DataConfig data;
  LoggingConfig logging;
  CheckpointConfig checkpoint;
  EvalConfig eval;
  ClusterConfig cluster;

  template <class F>
  void Fields(F&& f) {
    f("model", model, "Model architecture and freezing.");
    f("parallel", parallel, "Parallel layout.");
    f("train", train, "Training loop.");
    f("optimizer", optimizer, "AdamW and learning-rate schedule.");
    f("data", data, "Training data.");
    f("logging", logging, "Logs and metrics.");
    f("checkpoint", checkpoint, "Saving and resuming.");
    f("eval", eval, "Validation loss and perplexity during training.");
    f("cluster", cluster, "The machines whole layouts are planned for (cornstarch-plan --auto).");
  }
};

// Parses YAML text (`source` names it in errors), applies "key.path=value" overrides on top, checks that every key
// is known and every value has the right type, then runs Validate. Throws cornstarch::Error naming the key path
// (or file:line for malformed YAML).
Config ParseConfig(const std::string& yaml_text, const std::string& source,
                   const std::vector<std::string>& overrides = {});

// Reads `path` and parses it as above; a missing file is an Error naming it.
Config LoadConfig(const std::string& path, const std::vector<std::string>& overrides = {});

// Semantic checks across fields. Throws Error("<key.path>: <what was expected>, got <value>").
void Validate(const Config& config);

// Throws Error("<path>: <expected>, got <got>") unless `ok`: the form of every config error.
void RequireConfig(bool ok, const std::string& path, const std::string& expected, const std::string& got);

// The config as YAML, every field included: what the run actually uses.
std::string ToYaml(const Config& config);

// The configuration reference (Markdown): every field with its key path, type, default and meaning, generated from
// the Fields() lists. docs/configuration.md is this text; a test keeps the two equal.
std::string ConfigReference();

}  // namespace cornstarch
