#include "cornstarch/train/checkpoint.h"

#include <ATen/ATen.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <regex>
#include <tuple>

#include "cornstarch/dist/runtime.h"
#include "cornstarch/io/safetensors.h"
#include "cornstarch/base/check.h"
#include "cornstarch/train/checkpoint_manifest.h"

namespace cornstarch {

namespace fs = std::filesystem;

namespace {

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

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": missing; the checkpoint is partial or not a checkpoint");
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

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

std::string ShardName(int stage, int dp, int tp) {
  return "stage-" + std::to_string(stage) + (dp > 0 ? "-dp-" + std::to_string(dp) : "") +
         (tp > 0 ? "-tp-" + std::to_string(tp) : "");
}

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
                    const NamedTensors& shard, const std::string& shard_name,
                    const std::vector<std::string>& shard_names,
                    const std::vector<std::vector<int64_t>>& data_streams) {
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
  if (!shard_name.empty()) {
    const std::string file = (tmp / (shard_name + ".safetensors")).string();
    WriteSafetensors(file, shard, {{"step", std::to_string(step)}});
    nlohmann::json names = nlohmann::json::array();
    for (const auto& [name, t] : shard) names.push_back(name);
    const nlohmann::json sidecar = {{"file", shard_name + ".safetensors"},
                                    {"bytes", fs::file_size(file)},
                                    {"fnv1a64", FileChecksum(file)},
                                    {"tensors", names}};
    WriteFileAtomically((tmp / (shard_name + ".json")).string(), sidecar.dump(1) + "\n");
  }
  world.Barrier();
  if (lead) {
    const ParallelDims& d = runtime.dims();
    const nlohmann::json shards = shard_names;
    const nlohmann::json manifest = {
        {"format", kCheckpointFormat},
        {"version", kCheckpointVersion},
        {"step", step},
        {"optimizer_step", optimizer_step},
        {"samples_consumed", step * config.train.global_batch_size},
        {"layout", {{"pp", d.degree(Axis::kPP)}, {"dp", d.degree(Axis::kDP)}, {"cp", d.degree(Axis::kCP)},
                    {"tp", d.degree(Axis::kTP)}}},
        {"train", {{"seed", config.train.seed}, {"global_batch_size", config.train.global_batch_size}}},
        {"shards", shards}};
    nlohmann::json full = manifest;
    if (!data_streams.empty()) full["data_streams"] = data_streams;
    WriteFileAtomically((tmp / "manifest.json").string(), full.dump(1) + "\n");
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
  const CheckpointManifest m = ParseCheckpointManifest(ReadText(manifest_path), manifest_path);
  step_ = m.step;
  optimizer_step_ = m.optimizer_step;
  data_streams_ = m.data_streams;
  for (const auto& [key, saved, mine] : {std::tuple<std::string, int64_t, int64_t>{"seed", m.seed, config.train.seed},
                                         {"global_batch_size", m.global_batch_size, config.train.global_batch_size}}) {
    if (saved != mine) {
      throw Error(dir + ": saved with train." + key + "=" + std::to_string(saved) + ", the config has " +
                  std::to_string(mine) + "; resuming would not continue the same run");
    }
  }
  for (const std::string& shard : m.shards) {
    const std::string sidecar_path = (fs::path(dir) / (shard + ".json")).string();
    const ShardSidecar s = ParseShardSidecar(ReadText(sidecar_path), sidecar_path);
    expected_[s.file] = {s.bytes, s.checksum};
    for (const std::string& name : s.tensors) {
      file_of_[name] = s.file;
      if (const std::optional<TensorPiece> p = ParsePieceName(name)) {
        pieces_[p->tensor].push_back({p->begin, p->end, name});
      } else if (const std::optional<TpSliceName> t = ParseTpSliceName(name)) {
        Slices& s = slices_.try_emplace(t->tensor, Slices{t->split, std::vector<std::string>(t->size)}).first->second;
        if (s.split != t->split || static_cast<int>(s.names.size()) != t->size || !s.names[t->rank].empty()) {
          throw Error(sidecar_path + ": tp slice '" + name + "' disagrees with another slice of '" + t->tensor + "'");
        }
        s.names[t->rank] = name;
      }
    }
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

at::Tensor CheckpointReader::Get(const std::string& name) { return Shard(file_of_.at(name)).Get(name); }

at::Tensor CheckpointReader::Assemble(const std::string& name) {
  const Slices& s = slices_.at(name);
  std::vector<at::Tensor> slices;
  for (size_t r = 0; r < s.names.size(); ++r) {
    if (s.names[r].empty()) {
      throw Error(dir_ + ": tensor '" + name + "' lacks the slice of tp rank " + std::to_string(r) + " of " +
                  std::to_string(s.names.size()));
    }
    slices.push_back(Get(s.names[r]));
  }
  try {
    return TpJoin(slices, s.split);
  } catch (const c10::Error&) {
    throw Error(dir_ + ": the tp slices of tensor '" + name + "' do not fit together");
  }
}

void CheckpointReader::ReadTpSlice(const std::string& name, TpSplit split, const TpShard& shard,
                                   const at::Tensor& into) {
  const auto it = slices_.find(name);
  if (it != slices_.end() && it->second.split == split && static_cast<int>(it->second.names.size()) == shard.size) {
    Read(it->second.names[static_cast<size_t>(shard.rank)], into);
    return;
  }
  const at::Tensor whole = at::empty(TpWholeSizes(into.sizes(), split, shard.size), into.options());
  Read(name, whole);
  at::NoGradGuard no_grad;
  into.copy_(TpSlice(whole, split, shard));
}

void CheckpointReader::Read(const std::string& name, const at::Tensor& into) {
  if (file_of_.count(name) || slices_.count(name)) {
    const at::Tensor t = file_of_.count(name) ? Get(name) : Assemble(name);
    if (t.sizes() != into.sizes() || t.scalar_type() != into.scalar_type()) {
      throw Error((file_of_.count(name) ? Shard(file_of_.at(name)).path() : dir_) + ": tensor '" + name + "' is " +
                  std::string(c10::toString(t.scalar_type())) + " " + c10::str(t.sizes()) + ", the model needs " +
                  std::string(c10::toString(into.scalar_type())) + " " + c10::str(into.sizes()));
    }
    at::NoGradGuard no_grad;
    into.copy_(t);
    return;
  }
  ReadRange(name, into.numel(), 0, into);
}

void CheckpointReader::ReadRange(const std::string& name, int64_t numel, int64_t begin, const at::Tensor& into) {
  at::NoGradGuard no_grad;
  const int64_t n = into.numel();
  CS_CHECK(begin >= 0 && begin + n <= numel, "range [", begin, ", ", begin + n, ") of ", numel, " elements");
  // Each stored piece: its element range and tensor name (a whole tensor is the piece [0, numel)).
  std::vector<Piece> pieces;
  if (slices_.count(name)) {
    const at::Tensor whole = Assemble(name);
    if (whole.numel() != numel) {
      throw Error(dir_ + ": tensor '" + name + "' has " + std::to_string(whole.numel()) +
                  " elements, the model needs " + std::to_string(numel));
    }
    into.view({-1}).copy_(whole.reshape({-1}).narrow(0, begin, n));
    return;
  }
  if (file_of_.count(name)) {
    pieces.push_back({0, Get(name).numel(), name});
  } else if (pieces_.count(name)) {
    pieces = pieces_.at(name);
  } else {
    throw Error(dir_ + ": no tensor '" + name + "' (was the checkpoint saved from a different model?)");
  }
  int64_t end = 0;
  for (const Piece& p : pieces) end = std::max(end, p.end);
  if (end != numel) {
    throw Error(dir_ + ": tensor '" + name + "' has " + std::to_string(end) + " elements, the model needs " +
                std::to_string(numel));
  }
  // The pieces of different dp ranks tile the tensor: copy the overlap of each with the wanted range.
  at::Tensor flat = into.view({-1});
  int64_t covered = 0;
  for (const Piece& p : pieces) {
    const int64_t from = std::max(begin, p.begin), to = std::min(begin + n, p.end);
    if (from >= to) continue;
    const at::Tensor t = Get(p.name);
    if (t.numel() != p.end - p.begin || t.scalar_type() != into.scalar_type()) {
      throw Error(Shard(file_of_.at(p.name)).path() + ": piece '" + p.name + "' is " +
                  std::string(c10::toString(t.scalar_type())) + " " + c10::str(t.sizes()) + ", expected " +
                  std::to_string(p.end - p.begin) + " " + std::string(c10::toString(into.scalar_type())) +
                  " elements");
    }
    flat.narrow(0, from - begin, to - from).copy_(t.reshape({-1}).narrow(0, from - p.begin, to - from));
    covered += to - from;
  }
  if (covered != n) {
    throw Error(dir_ + ": the checkpoint's pieces of '" + name + "' do not cover elements [" + std::to_string(begin) +
                ", " + std::to_string(begin + n) + ")");
  }
}

}  // namespace cornstarch
