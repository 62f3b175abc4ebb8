// Whole layouts at paper scale, predicted (plan/layout_search.h; nothing is trained): for each paper model
// (bench/paper_models.h) on 24 GPUs of 48 GB, the best layout of the full search (cornstarch-plan --auto: every
// tp x pp x cp x dp, micro-batch size, recomputation, sequence parallelism, tower split, 1F1B or interleaved;
// frozen-aware placement) against the best layout when every encoder sits on the first LLM stage (the
// Megatron-style colocated placement) and the best one planned on frozen-unaware costs (backward = 2 x forward
// everywhere, timed on the true costs). The cluster: 3 nodes x 8 GPUs, 150 TFLOP/s bf16 dense each (A40-class) at
// 50% of it, 25 GB/s between GPUs of a node (PCIe 4.0); 200 Gb/s between nodes, as one NIC per node shared by its
// 8 GPUs (3.1 GB/s per GPU) or one per GPU (25 GB/s). bf16, global batch 32, micro-batch 1 to 32.
//   bazel build -c opt //bench:paper_layouts && bazel-bin/bench/paper_layouts
#include <cstdio>
#include <string>
#include <vector>

#include "bench/paper_models.h"
#include "cornstarch/base/check.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/plan/layout_search.h"

using namespace cornstarch;

int main() {
  try {
    std::printf("%-10s %-9s %-15s | %-40s %9s %9s %6s %7s %8s | %s\n", "model", "NIC", "placement", "best layout",
                "step s", "tok/s", "MFU", "bubble", "mem GiB", "vs colocated");
    for (const std::string name : {"llava-1.5", "MMM"}) {
      for (const bool nic_per_gpu : {false, true}) {
        Config base = bench::PaperModel(name);
        base.train.precision = Precision::kBf16;
        base.cluster.gpus_per_node = 8;
        base.cluster.tflops = 150;
        base.cluster.efficiency = 0.5;
        base.cluster.memory_gib = 48;
        base.cluster.intra_node_gbps = 25;
        base.cluster.inter_node_gbps = nic_per_gpu ? 25 : 25.0 / 8;
        double colocated = 0;
        for (const PlanMode mode : {PlanMode::kColocated, PlanMode::kFrozenAware, PlanMode::kFrozenUnaware}) {
          Config c = base;
          c.parallel.pipeline = mode;
          const std::vector<LayoutCost> all = SearchLayouts(c, 24);
          const LayoutCost& best = all.front();
          if (!best.rejected.empty()) throw Error(name + ": no layout fits: " + best.rejected);
          if (mode == PlanMode::kColocated) colocated = best.step_seconds;
          std::printf("%-10s %-9s %-15s | %-40s %9.3f %9.0f %5.1f%% %6.1f%% %8.1f | %.2fx\n", name.c_str(),
                      nic_per_gpu ? "per GPU" : "per node", NameOf(mode), Describe(best.layout).c_str(),
                      best.step_seconds, best.tokens_per_second, 100 * best.mfu, 100 * best.bubble,
                      best.memory_bytes / (1ull << 30), colocated / best.step_seconds);
        }
      }
    }
    std::printf("\nvs colocated: the colocated (Megatron-style) best layout's predicted step over this one's\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "paper_layouts: %s\n", e.what());
    return 1;
  }
}
