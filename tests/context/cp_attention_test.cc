// Context-parallel attention equals the single-rank kernel. Under mpirun every rank builds the same random
// multimodal layouts and q/k/v (same seed), runs the whole-sequence kernel as the reference, then the
// distributed one on its share; outputs and the gradients of q, k, v must equal the reference's rows of this
// rank's tokens for all three splits. Tolerance: 1e-5 absolute + 1e-4 relative (dK/dV sums run in another
// order; everything else is the same arithmetic). And what a cp rank's layers hold, against the planner's estimate.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <random>

#include "cornstarch/data/batch.h"
#include "cornstarch/data/cp_layout.h"
#include "cornstarch/data/synthetic_dataset.h"
#include "cornstarch/dist/launch_env.h"
#include "cornstarch/dist/mpi_communicator.h"
#include "cornstarch/model/bitfield_attention.h"
#include "cornstarch/model/cp_attention.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/cost_model.h"
#include "tests/model/held_per_layer.h"

using namespace cornstarch;

namespace {

// Text, images, audio and padding in random runs, isolated instances or not; every other row packs several
// documents (a new one starts at a text run with probability 1/4).
torch::Tensor RandomWords(std::mt19937& rng, int64_t batch, int64_t n) {
  torch::Tensor words = torch::empty({batch, n}, torch::kLong);
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<std::vector<MaskSpan>> docs(1);
    int64_t used = 0;
    while (used < n) {
      const int kind = static_cast<int>(rng() % 4) - 2;  // pad, text, modality 0, modality 1
      const int64_t len = std::min<int64_t>(n - used, 1 + rng() % 300);
      if (b % 2 == 1 && kind == kTextToken && used > 0 && rng() % 4 == 0) docs.emplace_back();
      docs.back().push_back({kind == -2 && used == 0 ? kTextToken : kind, len});
      used += len;
    }
    const std::vector<int64_t> w = BuildPackedMaskWords(docs, 2, rng() % 2 == 0);
    std::copy(w.begin(), w.end(), words[b].data_ptr<int64_t>());
  }
  return words;
}

}  // namespace

TEST_CASE("CP attention forward and backward equal the single-rank kernel for every split", "[cp]") {
  const LaunchEnv env = DetectLaunchEnv();
  auto world = MakeMpiWorldCommunicator(120);
  const int cp = world->size(), rank = world->rank();
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t B = 2, H = 4, Hkv = trial == 1 ? 1 : 2, D = 16, n = 128 * cp * (trial + 1);
    const torch::Tensor words = RandomWords(rng, B, n);
    torch::manual_seed(trial);
    const torch::Tensor q0 = torch::randn({B, H, n, D}), k0 = torch::randn({B, Hkv, n, D});
    const torch::Tensor v0 = torch::randn({B, Hkv, n, D}), g = torch::randn({B, H, n, D});
    const torch::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    const torch::Tensor ref = BitfieldAttention(q, k, v, words);
    (ref * g).sum().backward();
    for (CpSplit split : {CpSplit::kContiguous, CpSplit::kZigzag, CpSplit::kBalanced}) {
      INFO("trial " << trial << " split " << NameOf(split) << " cp " << cp << " rank " << rank);
      const CpLayout layout = PlanCpLayout(words, cp, 128, split);
      const torch::Tensor ql = LocalRows(q0, layout, rank, 2).requires_grad_();
      const torch::Tensor kl = LocalRows(k0, layout, rank, 2).requires_grad_();
      const torch::Tensor vl = LocalRows(v0, layout, rank, 2).requires_grad_();
      const torch::Tensor out = CpBitfieldAttention(ql, kl, vl, words, layout, *world);
      (out * LocalRows(g, layout, rank, 2)).sum().backward();
      CHECK(torch::allclose(out, LocalRows(ref.detach(), layout, rank, 2), 1e-4, 1e-5));
      CHECK(torch::allclose(ql.grad(), LocalRows(q.grad(), layout, rank, 2), 1e-4, 1e-5));
      CHECK(torch::allclose(kl.grad(), LocalRows(k.grad(), layout, rank, 2), 1e-4, 1e-5));
      CHECK(torch::allclose(vl.grad(), LocalRows(v.grad(), layout, rank, 2), 1e-4, 1e-5));
      // Every token is held by exactly one rank.
      const torch::Tensor all = std::get<0>(layout.tokens.permute({1, 0, 2}).reshape({B, n}).sort(1));
      CHECK(torch::equal(all, torch::arange(n).expand({B, n})));
    }
  }
}

TEST_CASE("each layer of a cp rank holds what the planner estimates", "[cp][memory]") {
  // Every cp rank runs the towers on the whole microbatch and the LLM on its share of the tokens (its ShardBatch),
  // attention gathering the others' K and V. Against EstimateLayerMemory at seq_len / cp tokens, the fullest
  // rank's, within 5% per layer (16 KiB for the allocator's bookkeeping), fp32 and bf16.
  auto world = MakeMpiWorldCommunicator(120);
  const int cp = world->size(), rank = world->rank();
  for (const std::string precision : {"fp32", "bf16"}) {
    const Config cfg = MemoryTestConfig(precision, {"parallel.cp=" + std::to_string(cp)});
    const ModelSpec spec = BuildModelSpec(cfg.model);
    MultimodalModel model = TpSlice(cfg.model, 1, TpShard{});
    SyntheticDataset data(cfg.model, cfg.data, 1);
    const Batch whole = data.Get(0, 1);
    const Batch batch = ShardBatch(
        whole, PlanCpLayout(whole.mask_words, cp, cfg.parallel.cp_block, cfg.parallel.cp_split), rank);
    const Precision p = EffectivePrecision(cfg.train);
    const std::vector<double> held = HeldPerLayer(model, batch, nullptr, p, /*llm_stand_in=*/false, world.get());
    torch::Tensor fullest = torch::tensor(held, torch::kDouble);
    world->AllReduce(fullest, ReduceOp::kMax);
    torch::Tensor labelled = batch.labels.ne(-100).sum().to(torch::kDouble).reshape({1});
    world->AllReduce(labelled, ReduceOp::kMax);
    const std::vector<LayerMemory> memory = EstimateLayerMemory(
        cfg.model, spec, cfg.data.seq_len / cp, 1, 1, false, p, labelled.item<double>(), {}, cp);
    for (size_t i = 0; i < spec.layers.size(); ++i) {
      const double most = fullest[static_cast<int64_t>(i)].item<double>();
      INFO("cp " << cp << " rank " << rank << ", " << precision << ", " << spec.layers[i].name << ": held "
                 << held[i] << " bytes (the fullest rank " << most << "), estimated " << memory[i].activation_bytes);
      CHECK(std::abs(most - memory[i].activation_bytes) <= std::max(0.05 * most, 16384.0));
    }
  }
}
