#include "cornstarch/plan/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <regex>
#include <map>
#include <set>
#include <type_traits>
#include <sstream>

#include "cornstarch/base/check.h"
#include "cornstarch/plan/encoder_kind.h"

namespace cornstarch {
namespace {

std::string Join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  return "nothing";
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string UnknownKey(const std::string& path, const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, key.size() / 3) + 1;
  for (const std::string& candidate : known) {
    const size_t d = EditDistance(key, candidate);
    if (d < best_distance) best_distance = d, best = candidate;
  }
  if (!best.empty()) return Join(path, key) + ": unknown key; did you mean '" + best + "'?";
  std::string list;
  for (const std::string& candidate : known) list += (list.empty() ? "" : ", ") + candidate;
  return Join(path, key) + ": unknown key; expected one of: " + list;
}

// --- YAML -> structs -------------------------------------------------------------------------------------------

void Read(const YAML::Node& node, const std::string& path, std::string& value) {
  if (node.IsNull()) {  // "key:" or --set key= means the empty string
    value.clear();
    return;
  }
  if (!node.IsScalar()) throw Error(path + ": expected a string, got " + Describe(node));
  value = node.Scalar();
}

void Read(const YAML::Node& node, const std::string& path, bool& value) {
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    throw Error(path + ": expected true or false, got " + Describe(node));
  }
}

// The whole scalar must parse: "2.5" is not an integer, "3x" not a number.
template <class T>
void ReadNumber(const YAML::Node& node, const std::string& path, T& value, const char* expected) {
  const std::string text = node.IsScalar() ? node.Scalar() : "";
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) throw Error(path + ": expected " + expected + ", got " + Describe(node));
}

void Read(const YAML::Node& node, const std::string& path, int64_t& value) {
  ReadNumber(node, path, value, "an integer");
}

void Read(const YAML::Node& node, const std::string& path, double& value) { ReadNumber(node, path, value, "a number"); }

void Read(const YAML::Node& node, const std::string& path, std::vector<double>& value) {
  value.clear();
  if (node.IsNull()) return;
  if (!node.IsSequence()) throw Error(path + ": expected a list of numbers, got " + Describe(node));
  for (size_t i = 0; i < node.size(); ++i) {
    value.emplace_back();
    Read(node[i], path + "[" + std::to_string(i) + "]", value.back());
  }
}

// A string or a list of strings: "path: a.jsonl" and "path: [a.tar, b.tar]" both work.
void Read(const YAML::Node& node, const std::string& path, std::vector<std::string>& value) {
  value.clear();
  if (node.IsNull()) return;
  if (node.IsScalar()) {
    value.push_back(node.Scalar());
    return;
  }
  if (!node.IsSequence()) throw Error(path + ": expected a string or a list of strings, got " + Describe(node));
  for (size_t i = 0; i < node.size(); ++i) {
    value.emplace_back();
    Read(node[i], path + "[" + std::to_string(i) + "]", value.back());
  }
}

void Read(const YAML::Node& node, const std::string& path, std::vector<EncoderConfig>& value);
template <class T>
void ReadSection(const YAML::Node& node, const std::string& path, T& value);

void Read(const YAML::Node& node, const std::string& path, std::vector<DataSource>& value) {
  value.clear();
  if (node.IsNull()) return;
  if (!node.IsSequence()) throw Error(path + ": expected a list of {path, weight, media_dir}, got " + Describe(node));
  for (size_t i = 0; i < node.size(); ++i) {
    value.emplace_back();
    ReadSection(node[i], path + "[" + std::to_string(i) + "]", value.back());
  }
}

// "'a', 'b', 'c'": the names of an enum, for errors.
template <class E>
std::string ChoiceList() {
  std::string list;
  for (const char* name : Choices<E>::names) list += (list.empty() ? "'" : ", '") + std::string(name) + "'";
  return list;
}

// yaml-cpp keeps both entries of a repeated key and node[key] finds the first, so a repeat would silently lose
// the second value (or, for encoders, build two of the same name): refuse it with both lines.
void RequireUniqueKeys(const YAML::Node& map, const std::string& path) {
  std::map<std::string, int> first_line;
  for (const auto& entry : map) {
    const std::string key = entry.first.Scalar();
    const int line = entry.first.Mark().line + 1;
    const auto [it, fresh] = first_line.emplace(key, line);
    if (!fresh) {
      throw Error(Join(path, key) + ": key given twice (lines " + std::to_string(it->second) + " and " +
                  std::to_string(line) + "); keep one");
    }
  }
}

template <class T>
void ReadSection(const YAML::Node& node, const std::string& path, T& value);

template <class T>
void Read(const YAML::Node& node, const std::string& path, T& value) {
  if constexpr (std::is_enum_v<T>) {
    const std::string text = node.IsScalar() ? node.Scalar() : "";
    const auto& names = Choices<T>::names;
    const auto it = std::find_if(std::begin(names), std::end(names), [&](const char* n) { return text == n; });
    if (!node.IsScalar() || it == std::end(names)) {
      throw Error(path + ": must be one of " + ChoiceList<T>() + ", got " + Describe(node));
    }
    value = static_cast<T>(it - std::begin(names));
  } else {
    ReadSection(node, path, value);
  }
}

template <class T>
void ReadSection(const YAML::Node& node, const std::string& path, T& value) {
  if (node.IsNull()) return;  // "section:" with nothing under it keeps the defaults
  if (!node.IsMap()) throw Error(path + ": expected a mapping, got " + Describe(node));
  RequireUniqueKeys(node, path);
  std::vector<std::string> known;
  value.Fields([&](const char* key, auto&, const char*) { known.push_back(key); });
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    if (std::find(known.begin(), known.end(), key) == known.end()) throw Error(UnknownKey(path, key, known));
  }
  value.Fields([&](const char* key, auto& member, const char*) {
    if (const YAML::Node child = node[key]) Read(child, Join(path, key), member);
  });
}

void Read(const YAML::Node& node, const std::string& path, std::vector<EncoderConfig>& value) {
  value.clear();
  if (node.IsNull()) return;
  if (!node.IsMap()) throw Error(path + ": expected a mapping from encoder name to encoder, got " + Describe(node));
  RequireUniqueKeys(node, path);
  for (const auto& entry : node) {
    EncoderConfig encoder;
    encoder.name = entry.first.Scalar();
    Read(entry.second, Join(path, encoder.name), encoder);
    value.push_back(encoder);
  }
}

void ApplyOverride(YAML::Node& root, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error("--set: expected key.path=value, got '" + assignment + "'");
  }
  const std::string key_path = assignment.substr(0, eq);
  std::vector<std::string> keys;
  std::stringstream split(key_path);
  for (std::string key; std::getline(split, key, '.');) {
    if (key.empty()) throw Error("--set: empty key in '" + key_path + "'");
    keys.push_back(key);
  }
  YAML::Node node = root;
  std::string path;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    path = Join(path, keys[i]);
    YAML::Node child = node[keys[i]];
    if (!child.IsDefined() || child.IsNull()) {
      node[keys[i]] = YAML::Node(YAML::NodeType::Map);
    } else if (!child.IsMap()) {
      throw Error("--set " + key_path + ": " + path + " is " + Describe(child) + ", not a section");
    }
    node.reset(node[keys[i]]);
  }
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw Error("--set " + key_path + ": malformed value: " + e.msg);
  }
  node[keys.back()] = value;
}

// --- structs -> YAML -------------------------------------------------------------------------------------------

void Write(YAML::Emitter& out, const std::string& v) { out << YAML::DoubleQuoted << v; }
void Write(YAML::Emitter& out, bool v) { out << (v ? "true" : "false"); }
void Write(YAML::Emitter& out, int64_t v) { out << v; }
void Write(YAML::Emitter& out, double v) {
  char buf[32];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest text that reads back to the same double
  std::string text(buf, ptr);
  if (text.find_first_of(".en") == std::string::npos) text += ".0";
  out << text;
}
void Write(YAML::Emitter& out, const std::vector<double>& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (double x : v) Write(out, x);
  out << YAML::EndSeq;
}
void Write(YAML::Emitter& out, const std::vector<std::string>& v) {
  out << YAML::Flow << YAML::BeginSeq;
  for (const std::string& x : v) Write(out, x);
  out << YAML::EndSeq;
}
void Write(YAML::Emitter& out, const std::vector<EncoderConfig>& v);
void Write(YAML::Emitter& out, const std::vector<DataSource>& v);

template <class T>
void Write(YAML::Emitter& out, const T& value) {
  if constexpr (std::is_enum_v<T>) {
    out << NameOf(value);
  } else {
    out << YAML::BeginMap;
    const_cast<T&>(value).Fields([&](const char* key, auto& member, const char*) {
      out << YAML::Key << key << YAML::Value;
      Write(out, member);
    });
    out << YAML::EndMap;
  }
}

void Write(YAML::Emitter& out, const std::vector<EncoderConfig>& v) {
  out << YAML::BeginMap;
  for (const EncoderConfig& encoder : v) {
    out << YAML::Key << encoder.name << YAML::Value;
    Write<EncoderConfig>(out, encoder);
  }
  out << YAML::EndMap;
}

void Write(YAML::Emitter& out, const std::vector<DataSource>& v) {
  out << YAML::BeginSeq;
  for (const DataSource& source : v) Write<DataSource>(out, source);
  out << YAML::EndSeq;
}

// --- reference -------------------------------------------------------------------------------------------------

struct DocRow {
  std::string key, type, value, doc;
};

template <class T>
void Document(std::vector<DocRow>& rows, const std::string& path, T& value);

void DocumentField(std::vector<DocRow>& rows, const std::string& path, bool& v, const char* doc) {
  rows.push_back({path, "bool", v ? "true" : "false", doc});
}
void DocumentField(std::vector<DocRow>& rows, const std::string& path, int64_t& v, const char* doc) {
  rows.push_back({path, "int", std::to_string(v), doc});
}
void DocumentField(std::vector<DocRow>& rows, const std::string& path, double& v, const char* doc) {
  YAML::Emitter out;
  Write(out, v);
  rows.push_back({path, "float", out.c_str(), doc});
}
void DocumentField(std::vector<DocRow>& rows, const std::string& path, std::string& v, const char* doc) {
  rows.push_back({path, "string", "\"" + v + "\"", doc});
}
void DocumentField(std::vector<DocRow>& rows, const std::string& path, std::vector<double>& v, const char* doc) {
  YAML::Emitter out;
  Write(out, v);
  rows.push_back({path, "list of float", out.c_str(), doc});
}
void DocumentField(std::vector<DocRow>& rows, const std::string& path, std::vector<std::string>& v, const char* doc) {
  YAML::Emitter out;
  Write(out, v);
  rows.push_back({path, "string or list of string", out.c_str(), doc});
}
void DocumentField(std::vector<DocRow>& rows, const std::string& path, std::vector<DataSource>&, const char* doc) {
  rows.push_back({path, "list of sections", "[]", doc});
  DataSource source;
  Document(rows, path + "[]", source);
}
void DocumentField(std::vector<DocRow>& rows, const std::string& path, std::vector<EncoderConfig>&, const char* doc) {
  rows.push_back({path, "map: name -> encoder", "{}", doc});
  EncoderConfig encoder;
  Document(rows, path + ".<name>", encoder);
}
template <class T>
void DocumentField(std::vector<DocRow>& rows, const std::string& path, T& v, const char* doc) {
  if constexpr (std::is_enum_v<T>) {
    std::string type;
    for (const char* name : Choices<T>::names) type += (type.empty() ? "" : " \\| ") + std::string(name);
    rows.push_back({path, type, NameOf(v), doc});
  } else {
    rows.push_back({path, "section", "", doc});
    Document(rows, path, v);
  }
}

template <class T>
void Document(std::vector<DocRow>& rows, const std::string& path, T& value) {
  value.Fields([&](const char* key, auto& member, const char* doc) { DocumentField(rows, Join(path, key), member, doc); });
}

// --- validation ------------------------------------------------------------------------------------------------

template <class T>
std::string Str(const T& v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
std::string Str(const std::string& v) { return "'" + v + "'"; }
std::string Str(bool v) { return v ? "true" : "false"; }

template <class T>
void Require(bool ok, const std::string& path, const std::string& expected, const T& got) {
  if (!ok) RequireConfig(ok, path, expected, Str(got));
}

void RequirePositive(const std::string& path, int64_t v) { Require(v >= 1, path, "must be at least 1", v); }
void RequirePositive(const std::string& path, double v) { Require(v > 0, path, "must be positive", v); }

void ValidateEncoder(const EncoderConfig& e) {
  const std::string p = "model.encoders." + e.name;
  Require(std::regex_match(e.name, std::regex("[a-z][a-z0-9_]*")), p,
          "encoder names must be lower-case identifiers ([a-z][a-z0-9_]*)", e.name);
  RequirePositive(p + ".hidden_size", e.hidden_size);
  RequirePositive(p + ".num_layers", e.num_layers);
  Require(e.feature_layer <= -1 && e.feature_layer >= -e.num_layers, p + ".feature_layer",
          "must be from -1 (the last block) to -num_layers=" + Str(-e.num_layers), e.feature_layer);
  RequirePositive(p + ".num_heads", e.num_heads);
  Require(e.hidden_size % e.num_heads == 0, p + ".num_heads",
          "must divide hidden_size=" + Str(e.hidden_size), e.num_heads);
  RequirePositive(p + ".intermediate_size", e.intermediate_size);
  RequirePositive(p + ".layer_norm_eps", e.layer_norm_eps);
  KindOf(e.type).validate(e, p);
}

// The checks of one data section (`p`: "data" or "eval.data").
void ValidateData(const Config& c, const DataConfig& d, const std::string& p) {
  RequirePositive(p + ".seq_len", d.seq_len);
  Require(d.prefetch >= 0, p + ".prefetch", "must be >= 0", d.prefetch);
  if (d.type == DataType::kSynthetic) {
    Require(d.num_classes >= 2, p + ".num_classes", "must be at least 2", d.num_classes);
    Require(d.noise_std >= 0, p + ".noise_std", "must be >= 0", d.noise_std);
    Require(d.min_prompt_tokens >= 0, p + ".min_prompt_tokens", "must be >= 0", d.min_prompt_tokens);
    Require(d.max_prompt_tokens >= d.min_prompt_tokens, p + ".max_prompt_tokens",
            "must be >= min_prompt_tokens=" + Str(d.min_prompt_tokens), d.max_prompt_tokens);
  } else {
    Require(d.path.empty() != d.mix.empty(), p + ".path",
            "llava data needs its files in either " + p + ".path or " + p + ".mix (not both)",
            d.path.empty() ? "no files" : Str(d.path.size()) + " file patterns and a mix");
    for (size_t i = 0; i < d.mix.size(); ++i) {
      const std::string at = p + ".mix[" + Str(i) + "]";
      Require(!d.mix[i].path.empty(), at + ".path", "must name the dataset's files", "none");
      RequirePositive(at + ".weight", d.mix[i].weight);
    }
    Require(d.streams >= 0, p + ".streams", "must be >= 0 (0: one per dp rank)", d.streams);
    RequirePositive(p + ".workers", d.workers);
    Require(!d.tokenizer.empty(), p + ".tokenizer", "llava data needs a sentencepiece model file", d.tokenizer);
    Require(d.image_mean.empty() || d.image_mean.size() == 3, p + ".image_mean", "must be empty or [r, g, b]",
            d.image_mean.size());
    Require(d.image_std.empty() || d.image_std.size() == 3, p + ".image_std", "must be empty or [r, g, b]",
            d.image_std.size());
    for (size_t i = 0; i < d.image_std.size(); ++i) RequirePositive(p + ".image_std[" + Str(i) + "]", d.image_std[i]);
    Require(!d.image_token.empty() && d.image_token != d.audio_token, p + ".image_token",
            "must be non-empty and differ from " + p + ".audio_token", d.image_token);
    Require(!d.audio_token.empty(), p + ".audio_token", "must be non-empty", d.audio_token);
    std::map<InputModality, int> per_modality;
    for (const EncoderConfig& e : c.model.encoders) {
      const std::string at = "model.encoders." + e.name;
      const std::string type = NameOf(e.type);
      const InputModality modality = KindOf(e.type).modality;
      Require(++per_modality[modality] == 1, at, "llava data feeds one encoder per modality; a second " + type +
              " encoder would have no images of its own", type);
      Require(modality != InputModality::kImage || e.num_channels == 3, at + ".num_channels", "must be 3 (RGB) for llava data",
              e.num_channels);
    }
  }
  Require(c.parallel.cp == 1 || d.seq_len % (c.parallel.cp * c.parallel.cp_block) == 0, p + ".seq_len",
          "must be a multiple of parallel.cp x parallel.cp_block = " + Str(c.parallel.cp * c.parallel.cp_block),
          d.seq_len);
}

}  // namespace

void RequireConfig(bool ok, const std::string& path, const std::string& expected, const std::string& got) {
  if (!ok) throw Error(path + ": " + expected + ", got " + got);
}

Precision EffectivePrecision(const TrainConfig& train) {
  if (train.precision != Precision::kAuto) return train.precision;
  return train.device == DeviceType::kCuda ? Precision::kBf16 : Precision::kFp32;
}

void Validate(const Config& c) {
  const LlmConfig& llm = c.model.llm;
  RequirePositive("model.llm.vocab_size", llm.vocab_size);
  RequirePositive("model.llm.hidden_size", llm.hidden_size);
  RequirePositive("model.llm.num_layers", llm.num_layers);
  RequirePositive("model.llm.num_heads", llm.num_heads);
  Require(llm.hidden_size % llm.num_heads == 0, "model.llm.num_heads",
          "must divide hidden_size=" + Str(llm.hidden_size), llm.num_heads);
  Require((llm.hidden_size / llm.num_heads) % 2 == 0, "model.llm.num_heads",
          "must leave an even head_dim for RoPE (hidden_size=" + Str(llm.hidden_size) + ")", llm.num_heads);
  RequirePositive("model.llm.num_kv_heads", llm.num_kv_heads);
  Require(llm.num_heads % llm.num_kv_heads == 0, "model.llm.num_kv_heads",
          "must divide num_heads=" + Str(llm.num_heads), llm.num_kv_heads);
  RequirePositive("model.llm.intermediate_size", llm.intermediate_size);
  RequirePositive("model.llm.rope_theta", llm.rope_theta);
  RequirePositive("model.llm.rms_norm_eps", llm.rms_norm_eps);
  RequirePositive("model.init_std", c.model.init_std);
  // Modality bits 1..61 of the bitfield attention mask: one per encoder.
  Require(c.model.encoders.size() <= 61, "model.encoders", "at most 61 encoders fit the attention mask",
          c.model.encoders.size());
  for (const EncoderConfig& e : c.model.encoders) ValidateEncoder(e);
  bool any_trainable = !llm.frozen;
  for (const EncoderConfig& e : c.model.encoders) any_trainable = any_trainable || !e.frozen || !e.projector.frozen;
  Require(any_trainable, "model.llm.frozen", "at least one module must train, but the LLM and every encoder and "
          "projector are frozen", std::string("true"));

  RequirePositive("parallel.pp", c.parallel.pp);
  RequirePositive("parallel.cp", c.parallel.cp);
  RequirePositive("parallel.dp", c.parallel.dp);
  RequirePositive("parallel.tp", c.parallel.tp);
  // Tensor parallelism splits the LLM's heads, SwiGLU width and vocabulary into equal slices.
  for (const auto& [field, n] : {std::pair{"num_heads", llm.num_heads}, std::pair{"num_kv_heads", llm.num_kv_heads},
                                 std::pair{"intermediate_size", llm.intermediate_size},
                                 std::pair{"vocab_size", llm.vocab_size}}) {
    Require(n % c.parallel.tp == 0, std::string("model.llm.") + field,
            "must be a multiple of parallel.tp=" + Str(c.parallel.tp) + " (tensor parallelism splits it evenly)", n);
  }
  for (const EncoderConfig& e : c.model.encoders) {
    if (!e.tp) continue;
    for (const auto& [field, n] :
         {std::pair{"num_heads", e.num_heads}, std::pair{"intermediate_size", e.intermediate_size}}) {
      Require(n % c.parallel.tp == 0, "model.encoders." + e.name + "." + field,
              "must be a multiple of parallel.tp=" + Str(c.parallel.tp) + " while the tower is sharded (or set model."
              "encoders." + e.name + ".tp: false to run it whole on every tp rank)", n);
    }
  }
  if (c.parallel.schedule == ScheduleKind::kInterleaved) {
    Require(c.parallel.virtual_stages >= 2, "parallel.virtual_stages",
            "must be >= 2 with parallel.schedule 'interleaved'", c.parallel.virtual_stages);
    Require(c.parallel.pp >= 2, "parallel.pp", "must be >= 2 with parallel.schedule 'interleaved'", c.parallel.pp);
  } else {
    Require(c.parallel.virtual_stages == 1, "parallel.virtual_stages",
            "must be 1 with parallel.schedule '1f1b' (set schedule: interleaved for more)", c.parallel.virtual_stages);
  }
  RequirePositive("parallel.cp_block", c.parallel.cp_block);
  RequirePositive("parallel.timeout_seconds", c.parallel.timeout_seconds);
  RequirePositive("parallel.grad_bucket_mib", c.parallel.grad_bucket_mib);

  const TrainConfig& t = c.train;
  RequirePositive("train.steps", t.steps);
  RequirePositive("train.micro_batch_size", t.micro_batch_size);
  RequirePositive("train.global_batch_size", t.global_batch_size);
  Require(t.global_batch_size % (t.micro_batch_size * c.parallel.dp) == 0, "train.global_batch_size",
          "must be a multiple of micro_batch_size * parallel.dp = " + Str(t.micro_batch_size * c.parallel.dp),
          t.global_batch_size);
  Require(t.grad_clip_norm >= 0, "train.grad_clip_norm", "must be >= 0 (0 disables clipping)", t.grad_clip_norm);
  Require(t.num_threads >= 0, "train.num_threads", "must be >= 0 (0 uses every core)", t.num_threads);
  if (t.device == DeviceType::kCuda) {
    Require(c.parallel.cp == 1, "parallel.cp", "must be 1 with train.device 'cuda' (context parallelism runs on "
            "CPU only so far; pipeline and data parallelism run on GPUs)", c.parallel.cp);
  }

  const ClusterConfig& cl = c.cluster;
  RequirePositive("cluster.gpus_per_node", cl.gpus_per_node);
  RequirePositive("cluster.tflops", cl.tflops);
  Require(cl.efficiency > 0 && cl.efficiency <= 1, "cluster.efficiency", "must be in (0, 1]", cl.efficiency);
  Require(cl.layer_overhead_us >= 0, "cluster.layer_overhead_us", "must be >= 0", cl.layer_overhead_us);
  RequirePositive("cluster.memory_gib", cl.memory_gib);
  RequirePositive("cluster.intra_node_gbps", cl.intra_node_gbps);
  RequirePositive("cluster.inter_node_gbps", cl.inter_node_gbps);
  Require(cl.latency_us >= 0, "cluster.latency_us", "must be >= 0", cl.latency_us);
  Require(cl.cores_per_node >= 0, "cluster.cores_per_node", "must be >= 0", cl.cores_per_node);

  const OptimizerConfig& o = c.optimizer;
  RequirePositive("optimizer.lr", o.lr);
  Require(o.min_lr >= 0 && o.min_lr <= o.lr, "optimizer.min_lr", "must be in [0, lr=" + Str(o.lr) + "]", o.min_lr);
  Require(o.warmup_steps >= 0 && o.warmup_steps <= t.steps, "optimizer.warmup_steps",
          "must be in [0, train.steps=" + Str(t.steps) + "]", o.warmup_steps);
  Require(o.beta1 >= 0 && o.beta1 < 1, "optimizer.beta1", "must be in [0, 1)", o.beta1);
  Require(o.beta2 >= 0 && o.beta2 < 1, "optimizer.beta2", "must be in [0, 1)", o.beta2);
  RequirePositive("optimizer.eps", o.eps);
  Require(o.weight_decay >= 0, "optimizer.weight_decay", "must be >= 0", o.weight_decay);

  Require(c.logging.trace_first_step >= 1 && c.logging.trace_last_step >= c.logging.trace_first_step,
          "logging.trace_last_step", "must be >= trace_first_step=" + Str(c.logging.trace_first_step) + " >= 1",
          c.logging.trace_last_step);

  const CheckpointConfig& k = c.checkpoint;
  Require(k.interval >= 0, "checkpoint.interval", "must be >= 0 (0 saves only at the end)", k.interval);
  RequirePositive("checkpoint.keep_last", k.keep_last);
  Require(k.resume != "latest" || !k.dir.empty(), "checkpoint.resume",
          "'latest' needs checkpoint.dir to look in", k.resume);

  ValidateData(c, c.data, "data");
  const EvalConfig& ev = c.eval;
  Require(ev.interval >= 0, "eval.interval", "must be >= 0 (0 evaluates only at the end, if at_end)", ev.interval);
  RequirePositive("eval.steps", ev.steps);
  if (ev.enabled()) ValidateData(c, ev.data, "eval.data");

  RequirePositive("logging.interval", c.logging.interval);
  Require(c.logging.peak_tflops >= 0, "logging.peak_tflops",
          "must be >= 0 (0 picks the GPU's listed peak or measures the CPU)", c.logging.peak_tflops);
}

Config ParseConfig(const std::string& yaml_text, const std::string& source,
                   const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw Error(source + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                ": malformed YAML: " + e.msg);
  }
  if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw Error(source + ": expected a mapping of sections at the top, got " + Describe(root));
  for (const std::string& assignment : overrides) ApplyOverride(root, assignment);
  Config config;
  Read(root, "", config);
  Validate(config);
  return config;
}

Config LoadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open config file");
  std::stringstream text;
  text << in.rdbuf();
  // An empty document would run on the defaults: almost surely the wrong file, so say so rather than train.
  bool empty = true;
  try {
    empty = YAML::Load(text.str()).IsNull();
  } catch (const YAML::Exception&) {
    empty = false;  // malformed: ParseConfig reports where
  }
  if (empty) throw Error(path + ": the config file is empty (nothing but comments or blank lines)");
  return ParseConfig(text.str(), path, overrides);
}

std::string ConfigReference() {
  std::vector<DocRow> rows;
  Config defaults;
  Document(rows, "", defaults);
  std::string out =
      "# Configuration reference\n\n"
      "Every field of a `cornstarch-train` YAML config, with its default. Generated from\n"
      "`cornstarch/plan/config.h` by `cornstarch-train --config-reference`; a test keeps this file equal to\n"
      "that output. Any field can also be set on the command line: `--set key.path=value`.\n\n"
      "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const DocRow& r : rows) {
    const bool section = r.type == "section";
    out += "| " + (section ? "**`" + r.key + "`**" : "`" + r.key + "`") + " | " + r.type + " | " +
           (r.value.empty() ? "" : "`" + r.value + "`") + " | " + r.doc + " |\n";
  }
  return out;
}

std::string ToYaml(const Config& config) {
  YAML::Emitter out;
  Write(out, config);
  return std::string(out.c_str()) + "\n";
}

}  // namespace cornstarch
