#include "cornstarch/model/multimodal_model.h"

#include <torch/torch.h>

#include "cornstarch/model/chain_ends.h"
#include "cornstarch/plan/encoder_kind.h"
#include "cornstarch/model/recompute.h"
#include "cornstarch/model/transformer.h"
#include "cornstarch/base/check.h"
#include "cornstarch/base/random.h"

namespace cornstarch {

namespace {

// Qwen2-VL's vision rotary base.
constexpr double kVisionRopeTheta = 10000.0;

std::shared_ptr<Layer> MakeLayer(const ModelConfig& config, const ModelSpec& spec, int index) {
  const LayerSpec& ls = spec.layers[index];
  const ChainSpec& chain = spec.chains[ls.chain];
  const int pos = index - chain.begin;
  const int last = chain.end - chain.begin - 1;
  if (ls.chain == spec.llm_chain()) {
    if (pos == 0) return std::make_shared<TokenEmbed>(config.llm);
    if (pos == last) return std::make_shared<LmHead>(config.llm);
    return std::make_shared<DecoderBlock>(config.llm);
  }
  const EncoderConfig& enc = config.encoders[ls.chain];
  if (pos == 0) return std::make_shared<EncoderEmbed>(enc, ls.chain);
  if (pos == last) return std::make_shared<Projector>(enc, config.llm.hidden_size);
  if (pos == last - 1) return std::make_shared<EncoderOutput>(enc);
  return std::make_shared<EncoderBlock>(enc, ls.chain);
}

std::vector<int> AllLayers(const ModelConfig& config) {
  std::vector<int> all(BuildModelSpec(config).layers.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return all;
}

}  // namespace

MultimodalModel::MultimodalModel(const ModelConfig& config, uint64_t seed)
    : MultimodalModel(config, seed, AllLayers(config)) {}

MultimodalModel::MultimodalModel(const ModelConfig& config, uint64_t seed, const std::vector<int>& layers,
                                 const TpShard& tp)
    : config_(config), spec_(BuildModelSpec(config)), tp_(tp), layers_(spec_.layers.size()) {
  for (int i : layers) {
    CS_CHECK(i >= 0 && i < static_cast<int>(spec_.layers.size()) && !layers_[i], "layer index ", i);
    torch::manual_seed(MixSeed(seed, static_cast<uint64_t>(i)));
    std::shared_ptr<Layer> layer = MakeLayer(config, spec_, i);
    torch::NoGradGuard no_grad;
    for (auto& item : layer->named_parameters()) {
      const std::string& name = item.key();
      torch::Tensor& p = item.value();
      if (p.dim() >= 2 || name == "class_token") {  // weights and embeddings, CLIP's class embedding included
        p.normal_(0.0, config.init_std);
      } else if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
        p.zero_();
      } else {
        p.fill_(1.0);  // norm gains
      }
      p.set_requires_grad(spec_.layers[i].trainable);
    }
    if (tp.active()) layer->ShardTp(tp);
    layers_[i] = std::move(layer);
  }
}

void MultimodalModel::To(const c10::Device& device) {
  for (const std::shared_ptr<Layer>& layer : layers_) {
    if (layer) layer->to(device);
  }
}

ForwardContext MultimodalModel::MakeContext(const Batch& batch) const {
  ForwardContext ctx;
  ctx.batch = &batch;
  std::tie(ctx.rope_cos, ctx.rope_sin) =
      RopeTables(batch.positions, config_.llm.hidden_size / config_.llm.num_heads, config_.llm.rope_theta);
  ctx.encoder_rope.resize(config_.encoders.size());
  for (size_t k = 0; k < config_.encoders.size() && k < batch.modalities.size(); ++k) {
    const EncoderConfig& e = config_.encoders[k];
    const ModalityInput& m = batch.modalities[k];
    if (PackedTower(e) && e.dynamic_positions == VisionPositions::kRope2d) {
      ctx.encoder_rope[k] = Rope2dTables(m.grid, m.patches, m.inputs.size(0), m.inputs.size(1),
                                         e.hidden_size / e.num_heads, kVisionRopeTheta);
    }
  }
  return ctx;
}

torch::Tensor MultimodalModel::RunLayer(int index, const torch::Tensor& x, ForwardContext& ctx) {
  CS_CHECK(layers_.at(index), "layer ", spec_.layers[index].name, " is not built in this process");
  if (spec_.layers[index].needs_graph) {
    // Recomputation saves memory for backward; without gradients (evaluation) there is nothing to save.
    if (spec_.layers[index].recompute && torch::GradMode::is_enabled()) return Recompute(*layers_[index], x, ctx);
    return layers_[index]->Forward(x, ctx);
  }
  torch::NoGradGuard no_grad;
  return layers_[index]->Forward(x, ctx);
}

torch::Tensor MultimodalModel::Logits(const Batch& batch) {
  CS_CHECK(batch.modalities.size() + 1 == spec_.chains.size(), "batch has ", batch.modalities.size(),
           " modalities for ", spec_.chains.size() - 1, " encoders");
  ForwardContext ctx = MakeContext(batch);
  for (int c = 0; c < spec_.llm_chain(); ++c) {
    const ChainSpec& chain = spec_.chains[c];
    ctx.features.push_back(RunLayers(c, chain.begin, chain.end, batch.modalities[c].inputs, batch, ctx));
  }
  const ChainSpec& llm = spec_.chains[spec_.llm_chain()];
  return RunLayers(spec_.llm_chain(), llm.begin, llm.end, torch::Tensor(), batch, ctx);
}

torch::Tensor MultimodalModel::RunLayers(int chain, int begin, int end, torch::Tensor x, const Batch& batch,
                                         ForwardContext& ctx) {
  if (chain != spec_.llm_chain() && batch.modalities[chain].inputs.size(0) == 0) {
    return torch::empty({0, config_.llm.hidden_size}, batch.input_ids.options().dtype(torch::kFloat));
  }
  for (int i = begin; i < end; ++i) x = RunLayer(i, x, ctx);
  return x;
}

std::vector<int64_t> MultimodalModel::OutputSizes(int index, const Batch& batch) const {
  const LayerSpec& layer = spec_.layers.at(index);
  const ChainSpec& chain = spec_.chains[layer.chain];
  const int64_t llm_hidden = config_.llm.hidden_size;
  if (layer.chain == spec_.llm_chain()) {
    CS_CHECK(index < chain.end - 1, "the LM head's output never crosses a stage boundary");
    const int64_t s = batch.input_ids.size(1);
    return {batch.input_ids.size(0), tp_.sequence_parallel ? SpLength(s, tp_.size) : s, llm_hidden};
  }
  const int64_t n = batch.modalities[layer.chain].inputs.size(0);
  if (n == 0) return {0, llm_hidden};  // RunLayers' "no features"
  // embed, blocks: the tower's sequence; norm: the tokens it hands the projector; projector: at LLM width.
  const EncoderConfig& enc = config_.encoders[layer.chain];
  const int norm = chain.end - 2;
  if (PackedTower(enc)) {  // packed rows of patches throughout
    const torch::Tensor& x = batch.modalities[layer.chain].inputs;
    return {n, x.size(1), index < chain.end - 1 ? enc.hidden_size : llm_hidden};
  }
  if (index < norm) return {n, EncoderSequence(enc), enc.hidden_size};
  return {n, EncoderTokens(enc), index == norm ? enc.hidden_size : llm_hidden};
}

torch::Tensor MultimodalModel::TokenLossSum(const torch::Tensor& logits, const torch::Tensor& labels) {
  namespace F = torch::nn::functional;
  return F::cross_entropy(logits.reshape({-1, logits.size(-1)}).to(torch::kFloat), labels.reshape({-1}),
                          F::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
}

torch::Tensor MultimodalModel::HeadLossSum(const torch::Tensor& x, const Batch& batch, Communicator* tp) {
  const int head = spec_.chains[spec_.llm_chain()].end - 1;
  CS_CHECK(layers_.at(head), "layer ", spec_.layers[head].name, " is not built in this process");
  auto& lm_head = dynamic_cast<LmHead&>(*layers_[head]);
  if (spec_.layers[head].needs_graph) return lm_head.LossSum(x, batch.labels, tp);
  torch::NoGradGuard no_grad;
  return lm_head.LossSum(x, batch.labels, tp);
}

std::vector<std::pair<std::string, torch::Tensor>> MultimodalModel::Named(bool buffers) const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!layers_[i]) continue;
    for (const auto& item : buffers ? layers_[i]->named_buffers() : layers_[i]->named_parameters()) {
      out.emplace_back(spec_.layers[i].name + "." + item.key(), item.value());
    }
  }
  return out;
}

std::vector<TpSplit> MultimodalModel::ParameterSplits() const {
  std::vector<TpSplit> out;
  for (const std::shared_ptr<Layer>& layer : layers_) {
    if (!layer) continue;
    for (const auto& item : layer->named_parameters()) {
      out.push_back(tp_.active() ? layer->SplitOf(item.key()) : TpSplit::kReplicated);
    }
  }
  return out;
}

std::vector<torch::Tensor> MultimodalModel::TrainableParameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& [name, p] : NamedParameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

}  // namespace cornstarch
