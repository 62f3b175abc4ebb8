// Context-parallel attention on real ranks: for each MLLM layout and split, every rank times the kernel on its
// own share (forward + backward, its query tiles against all keys, one thread per rank, all ranks at once), and
// the slowest rank's end-to-end CP attention step (all-gather, kernel, dK/dV reduction) is timed too. Prints
// max/mean of the per-rank kernel times next to the balancer's predicted max/mean of allowed pairs.
//   bazel build -c opt //bench:cp_attention_bench && mpirun -np 2 bazel-bin/bench/cp_attention_bench [--sizes 8192,16384]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "bench/mllm_layouts.h"
#include "cornstarch/model/bitfield_attention.h"
#include "cornstarch/model/cp_attention.h"
#include "cornstarch/dist/launch_env.h"
#include "cornstarch/dist/mpi_communicator.h"
#include "cornstarch/device/torch_runtime.h"
#include "bench/timing.h"

using namespace cornstarch;
using cornstarch::bench::Seconds;

namespace {

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {8192, 16384};
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--sizes") {
      sizes.clear();
      std::stringstream list(argv[i + 1]);
      for (std::string s; std::getline(list, s, ',');) sizes.push_back(std::stoll(s));
    }
  }
  InitMpi(&argc, &argv);
  ConfigureTorchRuntime(1);
  auto world = MakeMpiWorldCommunicator(600);
  const int cp = world->size(), rank = world->rank();
  constexpr int64_t kBlock = 128, H = 4, D = 64;
  if (rank == 0) {
    std::printf("cp=%d ranks, 1 thread each; B=1, H=%lld, D=%lld; per-rank kernel forward+backward on its share\n",
                cp, static_cast<long long>(H), static_cast<long long>(D));
    std::printf("%-18s %6s %-10s | %9s %9s | %10s %10s | %9s\n", "layout", "N", "split", "max ms", "mean ms",
                "time m/m", "pairs m/m", "e2e ms");
  }
  for (const std::string& name : bench::MllmLayoutNames()) {
    for (int64_t n : sizes) {
      const bool isolate = name == "interleaved" && n / 1024 < kMaxGroups;
      const std::vector<int64_t> w = BuildMaskWords(bench::MllmLayout(name, n), 2, isolate);
      const torch::Tensor words = torch::tensor(w).reshape({1, n});
      torch::manual_seed(0);
      const torch::Tensor q = torch::randn({1, H, n, D}), k = torch::randn({1, H, n, D});
      const torch::Tensor v = torch::randn({1, H, n, D}), g = torch::randn({1, H, n, D});
      for (CpSplit split : {CpSplit::kContiguous, CpSplit::kZigzag, CpSplit::kBalanced}) {
        const CpLayout layout = PlanCpLayout(words, cp, kBlock, split);
        // This rank's kernel work alone: its query tiles against every key.
        BitfieldAttentionOptions o;
        std::vector<uint8_t> flags(static_cast<size_t>((n + o.tile_q - 1) / o.tile_q), 0);
        const torch::Tensor mine = layout.tokens[rank][0];
        for (int64_t i = 0; i < mine.size(0); ++i) flags[static_cast<size_t>(mine[i].item<int64_t>() / o.tile_q)] = 1;
        o.query_tiles = {flags};
        const torch::Tensor dout = torch::where(
            torch::tensor(std::vector<int64_t>(flags.begin(), flags.end())).repeat_interleave(o.tile_q).narrow(0, 0, n)
                .view({1, 1, n, 1}).gt(0), g, torch::zeros_like(g));
        world->Barrier();
        const double kernel = Seconds([&] {
          const auto [out, lse] = BitfieldAttentionForward(q, k, v, words, o);
          BitfieldAttentionBackward(q, k, v, words, out, lse, dout, o);
        });
        torch::Tensor times = torch::full({1}, kernel, torch::kDouble), all = torch::zeros({cp}, torch::kDouble);
        world->AllGather(times, all);
        // End to end, with the all-gather and the dK/dV reduction: the slowest rank sets the pace.
        const torch::Tensor ql = LocalRows(q, layout, rank, 2).requires_grad_();
        const torch::Tensor kl = LocalRows(k, layout, rank, 2).requires_grad_();
        const torch::Tensor vl = LocalRows(v, layout, rank, 2).requires_grad_();
        const torch::Tensor gl = LocalRows(g, layout, rank, 2);
        world->Barrier();
        torch::Tensor e2e = torch::full({1}, Seconds([&] {
                                          (CpBitfieldAttention(ql, kl, vl, words, layout, *world) * gl).sum().backward();
                                        }),
                                        torch::kDouble);
        world->AllReduce(e2e, ReduceOp::kMax);
        if (rank == 0) {
          const double max = all.max().item<double>(), mean = all.mean().item<double>();
          const CpAssignment a = AssignBlocks(BlockWork(w.data(), n, kBlock), cp, split);
          std::printf("%-18s %6lld %-10s | %9.1f %9.1f | %10.3f %10.3f | %9.1f\n", name.c_str(),
                      static_cast<long long>(n), NameOf(split), max * 1e3, mean * 1e3, max / mean,
                      a.max_over_mean(), e2e.item<double>() * 1e3);
        }
      }
    }
  }
  if (rank == 0) {
    std::printf("\ntime m/m: max/mean of the measured per-rank kernel times; pairs m/m: the balancer's max/mean of\n"
                "allowed (query, key) pairs per rank; e2e: slowest rank's CP attention forward+backward with comm\n");
  }
  return 0;
}
