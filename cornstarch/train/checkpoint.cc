#include "cornstarch/train/checkpoint.h"

#include <ATen/ATen.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "cornstarch/dist/runtime.h"
#include "cornstarch/io/safetensors.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "cornstarch-checkpoint";
constexpr int kVersion = 1;

// FNV-1a over the file's bytes: catches truncation and bit flips that leave the safetensors header intact.
std::string FileChecksum(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read");
  uint64_t h = 1469598103934665603ull;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    for (std::streamsize i = 0; i < in.gcount(); ++i) {
      h = (h ^ static_cast<uint8_t>(buffer[static_cast<size_t>(i)])) * 1099511628211ull;
    }
  }
  return fmt::format("{:016x}", h);
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": missing; the checkpoint is partial or not a checkpoint");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": malformed: " + e.what());
  }
}

std::string ShardName(int stage) { return "stage-" + std::to_string(stage); }

// Filesystem failures are the user's to fix (permissions, space): report them as Error with the path.
template <class F>
void Fs(const std::string& what, F&& f) {
  try {
    f();
  } catch (const fs::filesystem_error& e) {
    throw Error("checkpoint.dir: cannot " + what + ": " + e.what());
  }
}

}  // namespace

std::string CheckpointDirName(int64_t step) { return fmt::format("step-{:08d}", step); }

std::vector<int64_t> CompleteCheckpoints(const std::string& dir) {
  std::vector<int64_t> steps;
  std::error_code ec;
  if (dir.empty() || !fs::is_directory(dir, ec)) return steps;
  static const std::regex name("step-([0-9]{8})");
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string base = e.path().filename().string();
    if (std::regex_match(base, m, name) && fs::exists(e.path() / "manifest.json", ec)) {
      steps.push_back(std::stoll(m[1].str()));
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string ResolveResume(const CheckpointConfig& c) {
  if (c.resume != "latest") return c.resume;
  const std::vector<int64_t> steps = CompleteCheckpoints(c.dir);
  if (steps.empty()) throw Error("checkpoint.resume: latest, but " + c.dir + " holds no complete checkpoint");
  return (fs::path(c.dir) / CheckpointDirName(steps.back())).string();
}

void SaveCheckpoint(const Config& config, DistRuntime& runtime, int64_t step, int64_t optimizer_step,
                    const NamedTensors& shard, bool writer) {
  const CheckpointConfig& c = config.checkpoint;
  const fs::path final_dir = fs::path(c.dir) / CheckpointDirName(step);
  const fs::path tmp = final_dir.string() + ".tmp";
  Communicator& world = runtime.world();
  const bool lead = runtime.rank() == 0;
  if (lead) {
    Fs("prepare " + tmp.string(), [&] {
      fs::create_directories(c.dir);
      fs::remove_all(tmp);  // left over from a job killed while saving
      fs::create_directory(tmp);
    });
  }
  world.Barrier();
  if (writer) {
    const int stage = runtime.coord().pp;
    const std::string file = (tmp / (ShardName(stage) + ".safetensors")).string();
    WriteSafetensors(file, shard, {{"step", std::to_string(step)}});
    nlohmann::json names = nlohmann::json::array();
    for (const auto& [name, t] : shard) names.push_back(name);
    const nlohmann::json sidecar = {{"file", ShardName(stage) + ".safetensors"},
                                    {"bytes", fs::file_size(file)},
                                    {"fnv1a64", FileChecksum(file)},
                                    {"tensors", names}};
    WriteFileAtomically((tmp / (ShardName(stage) + ".json")).string(), sidecar.dump(1) + "\n");
  }
  world.Barrier();
  if (lead) {
    const ParallelDims& d = runtime.dims();
    nlohmann::json shards = nlohmann::json::array();
    for (int s = 0; s < d.degree(Axis::kPP); ++s) shards.push_back(ShardName(s));
    const nlohmann::json manifest = {
        {"format", kFormat},
        {"version", kVersion},
        {"step", step},
        {"optimizer_step", optimizer_step},
        {"samples_consumed", step * config.train.global_batch_size},
        {"layout", {{"pp", d.degree(Axis::kPP)}, {"dp", d.degree(Axis::kDP)}, {"cp", d.degree(Axis::kCP)}}},
        {"train", {{"seed", config.train.seed}, {"global_batch_size", config.train.global_batch_size}}},
        {"shards", shards}};
    WriteFileAtomically((tmp / "manifest.json").string(), manifest.dump(1) + "\n");
    Fs("publish " + final_dir.string(), [&] {
      fs::remove_all(final_dir);  // a run resumed from an earlier step saves this step again
      fs::rename(tmp, final_dir);
    });
    const std::vector<int64_t> steps = CompleteCheckpoints(c.dir);
    for (size_t i = 0; i + static_cast<size_t>(c.keep_last) < steps.size(); ++i) {
      Fs("delete an old checkpoint", [&] { fs::remove_all(fs::path(c.dir) / CheckpointDirName(steps[i])); });
    }
  }
  world.Barrier();
}

CheckpointReader::CheckpointReader(const std::string& dir, const Config& config) : dir_(dir) {
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  const nlohmann::json m = ReadJson(manifest_path);
  try {
    if (m.at("format") != kFormat || m.at("version") != kVersion) {
      throw Error(manifest_path + ": not a version " + std::to_string(kVersion) + " cornstarch checkpoint");
    }
    step_ = m.at("step").get<int64_t>();
    optimizer_step_ = m.at("optimizer_step").get<int64_t>();
    const auto& train = m.at("train");
    for (const auto& [key, mine] : {std::pair<std::string, int64_t>{"seed", config.train.seed},
                                    {"global_batch_size", config.train.global_batch_size}}) {
      const int64_t saved = train.at(key).get<int64_t>();
      if (saved != mine) {
        throw Error(dir + ": saved with train." + key + "=" + std::to_string(saved) + ", the config has " +
                    std::to_string(mine) + "; resuming would not continue the same run");
      }
    }
    if (m.at("samples_consumed").get<int64_t>() != step_ * config.train.global_batch_size) {
      throw Error(manifest_path + ": samples_consumed does not match step x global_batch_size");
    }
    for (const auto& shard : m.at("shards")) {
      const std::string sidecar_path = (fs::path(dir) / (shard.get<std::string>() + ".json")).string();
      const nlohmann::json s = ReadJson(sidecar_path);
      const std::string file = s.at("file").get<std::string>();
      expected_[file] = {s.at("bytes").get<uint64_t>(), s.at("fnv1a64").get<std::string>()};
      for (const auto& name : s.at("tensors")) file_of_[name.get<std::string>()] = file;
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(manifest_path + ": missing or mistyped field: " + e.what());
  }
}

CheckpointReader::~CheckpointReader() = default;

const SafetensorsFile& CheckpointReader::Shard(const std::string& file) {
  std::unique_ptr<SafetensorsFile>& open = open_[file];
  if (!open) {
    const std::string path = (fs::path(dir_) / file).string();
    std::error_code ec;
    const uint64_t bytes = fs::file_size(path, ec);
    if (ec) throw Error(path + ": missing from the checkpoint");
    const auto& [want_bytes, want_sum] = expected_.at(file);
    if (bytes != want_bytes) {
      throw Error(path + ": " + std::to_string(bytes) + " bytes, the checkpoint recorded " +
                  std::to_string(want_bytes) + "; the file is truncated or was replaced");
    }
    if (FileChecksum(path) != want_sum) {
      throw Error(path + ": checksum mismatch; the file is corrupt or was changed after saving");
    }
    open = std::make_unique<SafetensorsFile>(path);
  }
  return *open;
}

void CheckpointReader::Read(const std::string& name, const at::Tensor& into) {
  const auto it = file_of_.find(name);
  if (it == file_of_.end()) {
    throw Error(dir_ + ": no tensor '" + name + "' (was the checkpoint saved from a different model?)");
  }
  const SafetensorsFile& shard = Shard(it->second);
  const at::Tensor t = shard.Get(name);
  if (t.sizes() != into.sizes() || t.scalar_type() != into.scalar_type()) {
    throw Error(shard.path() + ": tensor '" + name + "' is " + std::string(c10::toString(t.scalar_type())) + " " +
                c10::str(t.sizes()) + ", the model needs " + std::string(c10::toString(into.scalar_type())) + " " +
                c10::str(into.sizes()));
  }
  at::NoGradGuard no_grad;
  into.copy_(t);
}

}  // namespace cornstarch
