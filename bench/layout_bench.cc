// The layout cost model (plan/layout_search.h) against measurement: layouts of one MLLM on 4 (or 2) CPU ranks, each
// trained for real, next to the step the model predicts for them. From the repository root:
//   bazel build -c opt //bench:layout_bench && mpirun -np 4 bazel-bin/bench/layout_bench [--steps N] [--rounds R]
// On 4 ranks: dp4 at micro-batch 1 and 2, pp4, pp4 interleaved (2 virtual stages), pp2 x dp2, cp2 x dp2, pp2 x cp2,
// tp2 x dp2, tp2 x pp2, tp4. On 2 ranks: dp2 at micro-batch 1 and 2, dp2 with recomputation, pp2 at 1 and 2, pp2
// interleaved, cp2, tp2, tp2 with sequence parallelism.
//
// This machine is described as a cluster first, all measured now with every rank running: cluster.tflops is the slowest
// rank's fp32 GEMM rate (bench ranks share the cores, as the training ranks will), the bandwidth comes from a 16 MiB
// all-reduce over the world and the latency from a one-float one. With more ranks than cores (4 ranks on a 2-core
// machine) cluster.cores_per_node says so: a rank idle in a pipeline's bubble leaves its core to the others. The share
// of the GEMM rate the layers reach (cluster.efficiency) and the fixed cost of a layer per microbatch
// (cluster.layer_overhead_us) are fitted to the first two layouts (all dp, micro-batch 1 and 2: the same FLOPs in half
// the microbatches), whose predictions are then exact by construction; the others are predicted blind. The trainers are
// built once and run in turn, R rounds of N steps; a layout's step is the median of the slowest rank's. Printed:
// predicted and measured per layout, the Spearman rank correlation over all, whether the predicted best is within 10%
// of the measured best, and the mean absolute error of the blind predictions.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "bench/timing.h"
#include "cornstarch/base/check.h"
#include "cornstarch/base/logging.h"
#include "cornstarch/device/torch_runtime.h"
#include "cornstarch/dist/launch_env.h"
#include "cornstarch/dist/machine_probe.h"
#include "cornstarch/dist/mpi_communicator.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/plan/layout_search.h"
#include "cornstarch/train/trainer.h"

using namespace cornstarch;
using cornstarch::bench::Median;

namespace {

// Ranks of `v` (0 = smallest); equal values share their mean rank, as Spearman's coefficient wants (the model
// predicts the same step for layouts that differ only in where the bubble falls when ranks share cores).
std::vector<double> Ranks(const std::vector<double>& v) {
  std::vector<size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
  std::vector<double> rank(v.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] - v[order[i]] <= 1e-9 * std::abs(v[order[i]])) ++j;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = static_cast<double>(i + j) / 2;
    i = j + 1;
  }
  return rank;
}

// Spearman's rank correlation: Pearson's over the ranks.
double Spearman(const std::vector<double>& a, const std::vector<double>& b) {
  const std::vector<double> ra = Ranks(a), rb = Ranks(b);
  const double n = static_cast<double>(a.size()), mean = (n - 1) / 2;
  double cov = 0, va = 0, vb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    cov += (ra[i] - mean) * (rb[i] - mean);
    va += (ra[i] - mean) * (ra[i] - mean);
    vb += (rb[i] - mean) * (rb[i] - mean);
  }
  return cov / std::sqrt(va * vb);
}

struct Run {
  Layout layout;
  std::unique_ptr<DistRuntime> runtime;
  std::unique_ptr<Trainer> trainer;
  std::vector<double> step;
  double predicted = 0;
};

}  // namespace

int main(int argc, char** argv) {
  const int steps = bench::IntFlag(argc, argv, "--steps", 2), rounds = bench::IntFlag(argc, argv, "--rounds", 3);
  InitMpi(&argc, &argv);
  const LaunchEnv env = DetectLaunchEnv();
  InitLogging(env.rank, "warn");
  return RunOrAbort([&] {
    const int n = env.world_size;
    if (n != 4 && n != 2) throw Error("layout_bench runs on 4 or 2 ranks (mpirun -np 4)");
    ConfigureTorchRuntime(1, env.local_world_size);
    const std::vector<std::string> base = {"model.llm.hidden_size=256",
                                           "model.llm.num_layers=8",
                                           "model.llm.num_heads=8",
                                           "model.llm.num_kv_heads=4",
                                           "model.llm.intermediate_size=704",
                                           "data.seq_len=256",
                                           "parallel.cp_block=64",
                                           "parallel.pipeline_costs=flops",
                                           "train.micro_batch_size=1",
                                           "train.global_batch_size=8",
                                           "train.num_threads=1",
                                           "train.steps=100000",
                                           "logging.metrics_path=",
                                           "logging.level=warn",
                                           "logging.peak_tflops=1"};
    Config config = LoadConfig("configs/tiny.yaml", base);

    // This machine as a cluster, measured with every rank running.
    ParallelConfig all;
    all.dp = n;
    DistRuntime probe(all, env, nullptr, nullptr);
    config.cluster = MeasureCpuCluster(probe.world(), env.local_world_size, config.cluster);
    config.cluster.memory_gib = 1e3;

    // The first two (all dp, micro-batch 1 and 2) calibrate the model; the others are predicted blind.
    const std::vector<Layout> layouts =
        n == 4 ? std::vector<Layout>{{1, 1, 1, 4, 1, false, false, true}, {1, 1, 1, 4, 2, false, false, true},
                                     {1, 4, 1, 1, 1, false, false, true},
                                     {1, 4, 1, 1, 1, false, false, true, 2},
                                     {1, 2, 1, 2, 1, false, false, true}, {1, 1, 2, 2, 1, false, false, true},
                                     {1, 2, 2, 1, 1, false, false, true}, {2, 1, 1, 2, 1, false, false, true},
                                     {2, 2, 1, 1, 1, false, false, true}, {4, 1, 1, 1, 1, false, false, true}}
               : std::vector<Layout>{{1, 1, 1, 2, 1, false, false, true}, {1, 1, 1, 2, 2, false, false, true},
                                     {1, 1, 1, 2, 1, true, false, true},  {1, 2, 1, 1, 1, false, false, true},
                                     {1, 2, 1, 1, 2, false, false, true}, {1, 2, 1, 1, 1, false, false, true, 2},
                                     {1, 1, 2, 1, 1, false, false, true},
                                     {2, 1, 1, 1, 1, false, false, true}, {2, 1, 1, 1, 1, false, true, true}};
    std::vector<Run> runs;
    for (const Layout& l : layouts) {
      Run r;
      r.layout = l;
      const Config c = WithLayout(config, l);
      r.runtime = std::make_unique<DistRuntime>(c.parallel, env, nullptr, nullptr);
      r.trainer = std::make_unique<Trainer>(c, *r.runtime);
      r.trainer->Step();  // warm-up: allocations, first-touch
      runs.push_back(std::move(r));
    }
    for (int round = 0; round < rounds; ++round) {
      for (Run& r : runs) {
        for (int s = 0; s < steps; ++s) {
          r.step.push_back(MaxOverRanks(r.runtime->world(), r.trainer->Step().step_seconds));
        }
      }
    }
    // Efficiency and layer overhead fitted to the two calibration layouts. An all-dp prediction is linear in
    // x = 1 / efficiency and o = the overhead: a x + b o + c, its coefficients read off three predictions. Same
    // FLOPs, half the microbatches: the difference of the two measured steps is the overhead's.
    struct Linear {
      double a, b, c;
    };
    const auto coefficients = [&](const Layout& l) {
      const auto at = [&](double x, double o_us) {
        Config c = config;
        c.cluster.efficiency = 1 / x;
        c.cluster.layer_overhead_us = o_us;
        return PredictLayout(c, l).step_seconds;
      };
      const double p0 = at(1, 0), p1 = at(2, 0), p2 = at(1, 1000);
      return Linear{p1 - p0, (p2 - p0) / 1e-3, 2 * p0 - p1};
    };
    const Linear f = coefficients(runs[0].layout), g = coefficients(runs[1].layout);
    const double t1 = Median(runs[0].step) - f.c, t2 = Median(runs[1].step) - g.c;
    double x = (t1 * g.b - t2 * f.b) / (f.a * g.b - g.a * f.b), o = (f.a * t2 - g.a * t1) / (f.a * g.b - g.a * f.b);
    if (!(o >= 0)) {  // noise made the larger micro-batch no faster: no overhead, efficiency from the first alone
      o = 0;
      x = t1 / f.a;
    }
    config.cluster.efficiency = std::min(1.0, 1 / x);
    config.cluster.layer_overhead_us = o * 1e6;
    std::vector<double> predicted, measured;
    for (Run& r : runs) {
      const LayoutCost cost = PredictLayout(config, r.layout);
      if (!cost.rejected.empty()) throw Error(Describe(r.layout) + ": " + cost.rejected);
      r.predicted = cost.step_seconds;
      predicted.push_back(r.predicted);
      measured.push_back(Median(r.step));
    }
    if (env.rank != 0) return 0;
    std::printf("%d ranks on %d cores, %d rounds x %d steps per layout, layouts alternating; measured here: GEMM "
                "%.1f GFLOP/s per rank, all-reduce %.2f GB/s, latency %.0f us; efficiency %.2f and layer overhead "
                "%.0f us (calibrated on %s and %s)\n",
                n, static_cast<int>(std::thread::hardware_concurrency()), rounds, steps, config.cluster.tflops * 1e3,
                config.cluster.intra_node_gbps, config.cluster.latency_us,
                config.cluster.efficiency, config.cluster.layer_overhead_us, Describe(runs[0].layout).c_str(),
                Describe(runs[1].layout).c_str());
    std::printf("%-28s %12s %12s %10s\n", "layout", "predicted s", "measured s", "pred/meas");
    double error = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      std::printf("%-28s %12.4f %12.4f %10.2f\n", Describe(runs[i].layout).c_str(), predicted[i], measured[i],
                  predicted[i] / measured[i]);
      if (i > 1) error += std::abs(predicted[i] - measured[i]) / measured[i];
    }
    const size_t best_predicted = std::min_element(predicted.begin(), predicted.end()) - predicted.begin();
    const double best_measured = *std::min_element(measured.begin(), measured.end());
    std::printf("Spearman rank correlation %.2f (target >= 0.8); the predicted best (%s) measures %.2fx the measured "
                "best (target <= 1.10); mean absolute error of the %zu blind predictions %.0f%%\n",
                Spearman(predicted, measured), Describe(runs[best_predicted].layout).c_str(),
                measured[best_predicted] / best_measured, runs.size() - 2, 100 * error / (runs.size() - 2));
    return 0;
  });
}
