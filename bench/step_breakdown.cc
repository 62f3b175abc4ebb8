// Where a training step's time goes on this machine, for one config trained in this process: model FLOPs per step,
// the FLOP/s reached (and as MFU of the measured GEMM rate), and the share of step time in GEMMs (matrix products and
// convolutions, forward and backward), the LLM's attention kernel, the optimizer (grad norm, clipping, AdamW), data
// (waiting for the prepared microbatches) and everything else (element-wise ops, norms, copies, autograd), with the
// costliest of those other ops, and of the ops inside the attention kernel, by name.
//
// How: a RecordFunction callback on the training thread sees every LibTorch op and cornstarch's own scopes
// (device/profile_scopes.h). Each op's self time (its wall time less the ops nested in it) is charged once, to the
// outermost cornstarch scope around it, else to GEMM or other by its name; the step's time outside any op is
// "other" too. Work that ops fan out to the intra-op threads is inside its op's wall time.
//
//   bazel run //bench:step_breakdown -- --config configs/bench/w1.yaml [--steps 3] [--set key=value ...]
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cornstarch/device/profile_scopes.h"
#include "cornstarch/device/torch_runtime.h"
#include "cornstarch/train/trainer.h"
#include "tools/command_line.h"

namespace cornstarch {
namespace {

enum class Part { kGemm, kAttention, kOptimizer, kData, kGradSync, kOther, kCount };
constexpr const char* kPartNames[] = {"GEMM", "attention", "optimizer", "data", "grad sync", "other ops"};

Part ScopePart(const std::string& name) {
  if (name == scope::kAttention) return Part::kAttention;
  if (name == scope::kOptimizer) return Part::kOptimizer;
  if (name == scope::kData) return Part::kData;
  if (name == scope::kGradSync) return Part::kGradSync;
  return Part::kCount;  // not a cornstarch scope
}

bool IsGemm(const std::string& name) {
  static const char* const kGemms[] = {"aten::mm",  "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm",
                                       "aten::mv",  "aten::addmv", "aten::dot", "aten::addr"};
  for (const char* g : kGemms) {
    if (name == g) return true;
  }
  // Convolutions lower to GEMMs (im2col) inside their own kernels.
  return name.find("conv") != std::string::npos && name.rfind("aten::", 0) == 0;
}

using Clock = std::chrono::steady_clock;

struct Frame {
  std::string name;
  Clock::time_point start;
  double nested = 0;    // seconds of ops nested directly inside
  Part scope;           // the outermost cornstarch scope around this frame (kCount: none)
};

// One training thread's accounting; the callbacks ignore other threads.
struct Ledger {
  std::thread::id thread;
  std::vector<Frame> stack;
  double seconds[static_cast<int>(Part::kCount)] = {};
  std::map<std::string, double> other;      // self seconds of the "other" ops by name
  std::map<std::string, double> attention;  // self seconds of the ops inside the attention kernel by name
  bool on = false;
};
Ledger ledger;

std::unique_ptr<at::ObserverContext> OnStart(const at::RecordFunction& fn) {
  if (!ledger.on || std::this_thread::get_id() != ledger.thread) return nullptr;
  const std::string name = fn.name();
  Part scope = ledger.stack.empty() ? Part::kCount : ledger.stack.back().scope;
  if (scope == Part::kCount) scope = ScopePart(name);
  ledger.stack.push_back({name, Clock::now(), 0.0, scope});
  return nullptr;
}

void OnEnd(const at::RecordFunction&, at::ObserverContext*) {
  if (!ledger.on || std::this_thread::get_id() != ledger.thread || ledger.stack.empty()) return;
  const Frame f = ledger.stack.back();
  ledger.stack.pop_back();
  const double total = std::chrono::duration<double>(Clock::now() - f.start).count();
  if (!ledger.stack.empty()) ledger.stack.back().nested += total;
  const double self = total - f.nested;
  Part part = f.scope;
  if (part == Part::kCount) part = IsGemm(f.name) ? Part::kGemm : Part::kOther;
  ledger.seconds[static_cast<int>(part)] += self;
  if (part == Part::kOther) ledger.other[f.name] += self;
  if (part == Part::kAttention) ledger.attention[f.name] += self;
}

int Main(int argc, char** argv) {
  std::string config_path;
  std::vector<std::string> overrides;
  int64_t steps = 3;
  tools::ParseCommandLine(
      argc, argv,
      "usage: step_breakdown --config FILE [--steps N] [--set key=value ...]\n"
      "Trains N steps (after one warm-up step) of FILE in this process and prints where each step's time went.\n",
      {{"--config", true, [&](const std::string& v) { config_path = v; }},
       {"--set", true, [&](const std::string& v) { overrides.push_back(v); }},
       {"--steps", true, [&](const std::string& v) { steps = tools::ParseInteger("--steps", v); }}});
  Config config = tools::LoadToolConfig(config_path, overrides);
  config.train.steps = steps + 1;
  config.logging.metrics_path.clear();
  Trainer trainer(config);
  const double peak = MeasureGemmFlops();
  std::printf("%s: %s\n%s; GEMM rate %.0f GFLOP/s\n", tools::ConfigSource(config_path).c_str(),
              "one process, fp32", DescribeTorchRuntime().c_str(), peak / 1e9);
  trainer.Step();  // warm-up: first-touch allocations, the thread pool

  ledger.thread = std::this_thread::get_id();
  const at::CallbackHandle handle = at::addThreadLocalCallback(at::RecordFunctionCallback(OnStart, OnEnd));
  double step_seconds = 0, flops = 0;
  for (int64_t i = 0; i < steps; ++i) {
    ledger.on = true;
    const StepMetrics m = trainer.Step();
    ledger.on = false;
    step_seconds += m.step_seconds;
    flops += m.flops;
  }
  at::removeCallback(handle);

  double counted = 0;
  for (const double s : ledger.seconds) counted += s;
  const double outside = std::max(0.0, step_seconds - counted);  // between ops: the trainer's and autograd's own code
  ledger.seconds[static_cast<int>(Part::kOther)] += outside;
  ledger.other["(outside any op)"] += outside;
  const double per_step = step_seconds / steps;
  std::printf("%lld measured steps: %.0f ms/step, %.1f GFLOP/step of model work, %.1f GFLOP/s = MFU %.1f%%\n\n",
              static_cast<long long>(steps), per_step * 1e3, flops / steps / 1e9, flops / step_seconds / 1e9,
              100 * flops / step_seconds / peak);
  std::printf("%-12s %10s %7s\n", "part", "ms/step", "share");
  for (int p = 0; p < static_cast<int>(Part::kCount); ++p) {
    std::printf("%-12s %10.1f %6.1f%%\n", kPartNames[p], ledger.seconds[p] / steps * 1e3,
                100 * ledger.seconds[p] / step_seconds);
  }
  const auto costliest = [&](const char* title, const std::map<std::string, double>& ops) {
    std::vector<std::pair<double, std::string>> sorted;
    for (const auto& [name, s] : ops) sorted.emplace_back(s, name);
    std::sort(sorted.rbegin(), sorted.rend());
    std::printf("\n%s (self time):\n", title);
    for (size_t i = 0; i < std::min<size_t>(10, sorted.size()); ++i) {
      std::printf("  %-40s %8.1f ms/step %5.1f%%\n", sorted[i].second.c_str(), sorted[i].first / steps * 1e3,
                  100 * sorted[i].first / step_seconds);
    }
  };
  costliest("costliest other ops", ledger.other);
  costliest("inside the attention kernel", ledger.attention);
  return 0;
}

}  // namespace
}  // namespace cornstarch

int main(int argc, char** argv) {
  cornstarch::tools::EnterUserDirectory();
  try {
    return cornstarch::Main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
