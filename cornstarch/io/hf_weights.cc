#include "cornstarch/io/hf_weights.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cornstarch/io/safetensors.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/base/check.h"
#include "cornstarch/io/hf_index.h"

namespace cornstarch {

namespace fs = std::filesystem;

namespace {

// Every tensor name a checkpoint of this architecture (an encoder's, or the LLM's when `encoder` is null) has,
// whether or not we use it.
bool UnderArchitecture(const std::string& name, const EncoderConfig* encoder) {
  auto starts = [&](const std::string& p) { return name.rfind(p, 0) == 0; };
  if (!encoder) return starts("model.layers.") || starts("model.embed_tokens.") || starts("model.norm.") || starts("lm_head.");
  return starts(KindOf(encoder->type).hf_names(*encoder).root);
}

// Tensors a checkpoint may hold that this model derives itself or has no use for: RoPE frequencies, position-id
// buffers, Whisper's sinusoidal positions (compared with ours on load), SigLIP's attention-pooling head (not part
// of the token features an MLLM uses).
bool Derived(const std::string& name) {
  return name.find("rotary_emb.inv_freq") != std::string::npos ||
         name.find("embeddings.position_ids") != std::string::npos ||
         name.find("embed_positions.weight") != std::string::npos || name.rfind("vision_model.head.", 0) == 0;
}

// A checkpoint: one file, or shards listed by an index.
class HfSource {
 public:
  explicit HfSource(const std::string& path) : path_(path) {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) {
      Open(path);
      return;
    }
    const fs::path index = fs::path(path) / "model.safetensors.index.json";
    if (fs::exists(index, ec)) {
      std::ifstream in(index, std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      for (const auto& [name, file] : ParseHfIndex(text, index.string())) {
        shard_of_[name] = (fs::path(path) / file).string();
      }
      return;
    }
    const fs::path single = fs::path(path) / "model.safetensors";
    if (!fs::exists(single, ec)) {
      throw Error(path + ": neither model.safetensors nor model.safetensors.index.json in this directory");
    }
    Open(single.string());
  }

  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, file] : shard_of_) out.push_back(name);
    return out;
  }
  bool contains(const std::string& name) const { return shard_of_.count(name) > 0; }
  const std::string& file_of(const std::string& name) const { return shard_of_.at(name); }

  // The file that holds `name`, opened on first use.
  const SafetensorsFile& File(const std::string& name) {
    const std::string& file = shard_of_.at(name);
    std::unique_ptr<SafetensorsFile>& f = open_[file];
    if (!f) f = std::make_unique<SafetensorsFile>(file);
    if (!f->contains(name)) throw Error(file + ": no tensor '" + name + "', though the index lists it here");
    return *f;
  }
  torch::Tensor Get(const std::string& name) { return File(name).Get(name); }

 private:
  void Open(const std::string& file) {
    auto f = std::make_unique<SafetensorsFile>(file);
    for (const auto& [name, e] : f->header().tensors) shard_of_[name] = file;
    open_[file] = std::move(f);
  }

  std::string path_;
  std::map<std::string, std::string> shard_of_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

// Block `i` of the tower; `ours` is our layer's name.
std::vector<HfTensor> EncoderBlockTensors(const EncoderConfig& e, int64_t i, const std::string& ours) {
  const HfEncoderNames n = KindOf(e.type).hf_names(e);
  const std::string p = n.blocks + std::to_string(i) + ".";
  const std::string attn = p + "self_attn.";
  std::vector<HfTensor> out;
  auto both = [&](const std::string& mine, const std::string& theirs) {
    out.push_back({ours + "." + mine + ".weight", {{theirs + ".weight"}}, ""});
    out.push_back({ours + "." + mine + ".bias", {{theirs + ".bias"}}, ""});
  };
  both("norm1", p + n.norm1);
  out.push_back({ours + ".qkv.weight", {{attn + "q_proj.weight"}, {attn + "k_proj.weight"}, {attn + "v_proj.weight"}}, ""});
  out.push_back({ours + ".qkv.bias",
                 {{attn + "q_proj.bias"}, n.k_bias ? HfPart{attn + "k_proj.bias"} : HfPart{"", e.hidden_size},
                  {attn + "v_proj.bias"}},
                 ""});
  both("out", attn + "out_proj");
  both("norm2", p + n.norm2);
  both("fc1", p + n.fc1);
  both("fc2", p + n.fc2);
  return out;
}

// Tensors of the tower this configuration knows but does not use: blocks after feature_layer, without post_norm
// the final LayerNorm, and what its kind lists (HfEncoderNames::unused). Neither missing nor unexpected.
std::vector<std::string> UnusedTensors(const EncoderConfig& e) {
  std::vector<std::string> out;
  for (int64_t i = EncoderBlocks(e); i < e.num_layers; ++i) {
    for (const HfTensor& t : EncoderBlockTensors(e, i, "")) {
      for (const HfPart& part : t.parts) {
        if (!part.name.empty()) out.push_back(part.name);
      }
    }
  }
  const HfEncoderNames names = KindOf(e.type).hf_names(e);
  if (!e.post_norm) out.insert(out.end(), {names.final_norm + ".weight", names.final_norm + ".bias"});
  out.insert(out.end(), names.unused.begin(), names.unused.end());
  return out;
}

std::string List(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < 8; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 8) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

// Whisper stores its fixed sinusoids as a tensor; we compute them (chain_ends.cc). A checkpoint whose positions
// are not those sinusoids (learned, or another formula) would silently train against different positions, so it
// is refused. 1e-2 absolute covers bf16 storage (rounding up to 2^-8 on values in [-1, 1]).
// The checkpoint's copy of a position table we compute (`names.fixed_positions`) must equal ours.
void CheckFixedPositions(const MultimodalModel& model, int embed_layer, HfSource& source, const std::string& prefix,
                         const HfEncoderNames& names) {
  const std::string name = prefix + names.fixed_positions;
  if (!source.contains(name)) return;
  torch::Tensor ours;
  for (const auto& [n, b] : model.NamedBuffers()) {
    if (n == model.spec().layers[embed_layer].name + ".position") ours = b;
  }
  CS_CHECK(ours.defined(), "no position buffer in ", model.spec().layers[embed_layer].name);
  const torch::Tensor theirs = source.Get(name).to(torch::kFloat);
  if (theirs.dim() != 2 || theirs.size(0) < ours.size(0) || theirs.size(1) != ours.size(1)) {
    throw Error(source.file_of(name) + ": " + name + " is " + c10::str(theirs.sizes()) + ", but the encoder needs at "
                "least " + c10::str(ours.sizes()) + " (a position per token, hidden_size wide)");
  }
  const torch::Tensor diff = (theirs.narrow(0, 0, ours.size(0)) - ours).abs();
  const double worst = diff.max().item<double>();
  if (worst > 1e-2) {
    const int64_t row = diff.argmax().item<int64_t>() / diff.size(1);
    throw Error(source.file_of(name) + ": " + name + " differs from " + names.fixed_positions_are + " by " +
                c10::str(worst) + " at position " + c10::str(row) + "; this encoder computes them and cannot take "
                "learned ones");
  }
}

}  // namespace

std::vector<HfTensor> HfTensorsOf(const ModelConfig& config, const ModelSpec& spec, int layer) {
  const LayerSpec& ls = spec.layers[layer];
  const ChainSpec& chain = spec.chains[ls.chain];
  const int pos = layer - chain.begin, last = chain.end - chain.begin - 1;
  std::vector<HfTensor> out;
  auto one = [&](const std::string& ours, const std::string& theirs, const std::string& fallback = "") {
    out.push_back({ls.name + "." + ours, {{theirs, 0}}, fallback});
  };
  auto both = [&](const std::string& ours, const std::string& theirs) {
    one(ours + ".weight", theirs + ".weight");
    one(ours + ".bias", theirs + ".bias");
  };
  if (ls.chain == spec.llm_chain()) {
    if (pos == 0) {
      one("embed.weight", "model.embed_tokens.weight");
    } else if (pos == last) {
      one("norm.weight", "model.norm.weight");
      one("out.weight", "lm_head.weight", "model.embed_tokens.weight");
    } else {
      const std::string p = "model.layers." + std::to_string(pos - 1) + ".";
      one("attn_norm.weight", p + "input_layernorm.weight");
      for (const char* m : {"q", "k", "v"}) {
        one(std::string(m) + ".weight", p + "self_attn." + m + "_proj.weight");
        if (config.llm.attention_bias) one(std::string(m) + ".bias", p + "self_attn." + m + "_proj.bias");
      }
      one("o.weight", p + "self_attn.o_proj.weight");
      one("mlp_norm.weight", p + "post_attention_layernorm.weight");
      for (const char* m : {"gate", "up", "down"}) one(std::string(m) + ".weight", p + "mlp." + m + "_proj.weight");
    }
    return out;
  }
  const EncoderConfig& e = config.encoders[ls.chain];
  if (pos == last) {  // the projector
    const std::string p = "multi_modal_projector." + e.name + ".";
    both("fc1", p + "linear_1");
    if (e.projector.type == ProjectorType::kMlp) both("fc2", p + "linear_2");
    return out;
  }
  if (pos == last - 1) {
    if (e.post_norm) both("norm", KindOf(e.type).hf_names(e).final_norm);
    return out;
  }
  if (pos == 0) {
    for (const auto& [ours, theirs] : KindOf(e.type).hf_names(e).embedding) one(ours, theirs);
    return out;
  }
  return EncoderBlockTensors(e, pos - 1, ls.name);
}

void LoadHfWeights(MultimodalModel& model, int chain) {
  const ModelSpec& spec = model.spec();
  const ModelConfig& config = model.config();
  const bool llm = chain == spec.llm_chain();
  const std::string& path = llm ? config.llm.weights : config.encoders[chain].weights;
  const std::string& prefix = llm ? config.llm.weights_prefix : config.encoders[chain].weights_prefix;
  const EncoderConfig* encoder = llm ? nullptr : &config.encoders[chain];
  const std::string module = llm ? "model.llm" : "model.encoders." + config.encoders[chain].name;
  HfSource source(path);
  std::map<std::string, torch::Tensor> params;
  std::map<std::string, TpSplit> splits;
  const auto named = model.NamedParameters();
  const std::vector<TpSplit> split_list = model.ParameterSplits();
  for (size_t i = 0; i < named.size(); ++i) {
    params[named[i].first] = named[i].second;
    splits[named[i].first] = split_list[i];
  }
  // What the whole chain maps to (every rank, whatever layers it holds), for the unexpected-tensor check.
  std::set<std::string> expected;
  std::vector<std::string> missing;
  torch::NoGradGuard no_grad;
  const ChainSpec& c = spec.chains[chain];
  for (int l = c.begin; l < c.end; ++l) {
    const bool projector = !llm && l == c.end - 1;  // no Hugging Face standard: trained from scratch
    for (const HfTensor& t : HfTensorsOf(config, spec, l)) {
      for (const HfPart& part : t.parts) {
        if (!part.name.empty()) expected.insert(prefix + part.name);
      }
      if (!t.fallback.empty()) expected.insert(prefix + t.fallback);
      if (projector || !model.has_layer(l)) continue;
      // The parts' names (empty: rows of zeros) and sizes, from the file headers: nothing read yet.
      std::vector<std::string> names;
      std::vector<std::vector<int64_t>> shapes;
      std::string from;
      for (const HfPart& part : t.parts) {
        std::string name = prefix + part.name;
        if (part.name.empty()) {
          names.emplace_back();
          shapes.push_back({part.zero_rows});
          continue;
        }
        if (!source.contains(name) && !t.fallback.empty() && names.empty()) name = prefix + t.fallback;
        if (!source.contains(name)) {
          missing.push_back(name);
          continue;
        }
        from = source.file_of(name);
        names.push_back(name);
        shapes.push_back(source.File(name).header().tensors.at(name).shape);
      }
      if (names.size() != t.parts.size()) continue;
      std::vector<int64_t> sizes = shapes[0];  // the parts stacked along dim 0
      bool stackable = true;
      for (size_t i = 1; i < shapes.size(); ++i) {
        stackable = stackable && shapes[i].size() == sizes.size() &&
                    std::equal(shapes[i].begin() + 1, shapes[i].end(), sizes.begin() + 1);
        if (!sizes.empty() && !shapes[i].empty()) sizes[0] += shapes[i][0];
      }
      torch::Tensor& p = params.at(t.ours);
      // A tensor-parallel slice is checked against the whole tensor it is cut from.
      const TpSplit split = splits.at(t.ours);
      const std::vector<int64_t> whole = TpWholeSizes(p.sizes(), split, model.tp().size);
      if (!stackable || sizes != whole) {
        const std::string what = stackable ? c10::str(c10::IntArrayRef(sizes)) : "of parts that do not stack";
        throw Error(from + ": " + prefix + t.parts[0].name + (t.parts.size() > 1 ? " (fused with the k/v parts)" : "") +
                    " is " + what + ", but " + t.ours + " needs " + c10::str(c10::IntArrayRef(whole)) +
                    "; check " + module + " against the checkpoint's config");
      }
      // Part i, cut as `cut` for this rank: only those bytes are copied out of the mapped file.
      const TpShard& shard = model.tp();
      auto read = [&](size_t i, TpSplit cut) {
        if (names[i].empty()) return TpSlice(torch::zeros(shapes[i]), cut, shard);
        if (cut == TpSplit::kReplicated || !shard.active()) return source.Get(names[i]).to(torch::kFloat);
        const int dim = cut == TpSplit::kDim1 ? 1 : 0;
        const int64_t n = shapes[i][dim];
        return source.File(names[i]).GetSlice(names[i], dim, shard.Begin(n), shard.Length(n)).to(torch::kFloat);
      };
      // Cut part by part where the parts are what the split cuts: one tensor, or the q/k/v blocks of a fused
      // projection; otherwise (a fused projection stored fused) the whole is read and cut.
      const bool by_part = split == TpSplit::kQkv ? t.parts.size() == 3 : t.parts.size() == 1;
      std::vector<torch::Tensor> pieces;
      for (size_t i = 0; i < t.parts.size(); ++i) {
        pieces.push_back(read(i, !by_part ? TpSplit::kReplicated : split == TpSplit::kQkv ? TpSplit::kDim0 : split));
      }
      const torch::Tensor value = pieces.size() == 1 ? pieces[0] : torch::cat(pieces);
      p.copy_(by_part ? value : TpSlice(value, split, shard));
    }
  }
  if (!llm) {
    for (const std::string& name : UnusedTensors(config.encoders[chain])) expected.insert(prefix + name);
  }
  if (!missing.empty()) throw Error(path + ": missing tensors for " + module + ": " + List(missing));
  if (encoder && model.has_layer(c.begin)) {
    const HfEncoderNames names = KindOf(encoder->type).hf_names(*encoder);
    if (!names.fixed_positions.empty()) CheckFixedPositions(model, c.begin, source, prefix, names);
  }
  std::vector<std::string> unexpected;
  for (const std::string& name : source.names()) {
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string bare = name.substr(prefix.size());
    if (UnderArchitecture(bare, encoder) && !Derived(bare) && !expected.count(name)) unexpected.push_back(name);
  }
  if (!unexpected.empty()) {
    throw Error(path + ": tensors " + module + " has no place for (more layers or another architecture in the "
                "checkpoint?): " + List(unexpected));
  }
}

void ExportHfWeights(const MultimodalModel& model, const std::string& path,
                     const std::map<std::string, at::Tensor>& whole, at::ScalarType dtype) {
  std::map<std::string, torch::Tensor> params = whole;
  if (params.empty()) {
    for (const auto& [name, p] : model.NamedParameters()) params[name] = p;
  }
  std::vector<std::pair<std::string, at::Tensor>> out;
  const ModelSpec& spec = model.spec();
  for (int l = 0; l < static_cast<int>(spec.layers.size()); ++l) {
    if (!model.has_layer(l)) continue;
    for (const HfTensor& t : HfTensorsOf(model.config(), spec, l)) {
      const torch::Tensor p = params.at(t.ours).detach().to(dtype);
      if (t.parts.size() == 1) {
        out.emplace_back(t.parts[0].name, p);
        continue;
      }
      const int64_t rows = p.size(0) / static_cast<int64_t>(t.parts.size());  // q, k, v of equal height
      for (size_t i = 0; i < t.parts.size(); ++i) {
        if (!t.parts[i].name.empty()) out.emplace_back(t.parts[i].name, p.narrow(0, static_cast<int64_t>(i) * rows, rows));
      }
    }
  }
  WriteSafetensors(path, out, {{"format", "pt"}});
}

void WriteHfIndex(const std::string& dir, const std::vector<std::string>& shards) {
  nlohmann::json map = nlohmann::json::object();
  for (const std::string& shard : shards) {
    const SafetensorsFile file(dir + "/" + shard);
    for (const auto& [name, entry] : file.header().tensors) map[name] = shard;
  }
  WriteFileAtomically(dir + "/model.safetensors.index.json",
                      nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", map}}.dump(1) + "\n");
}

}  // namespace cornstarch
