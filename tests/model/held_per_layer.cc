#include "tests/model/held_per_layer.h"

#include <malloc.h>

#include <utility>

#include "cornstarch/device/autocast.h"

namespace cornstarch {

Config MemoryTestConfig(const std::string& precision, const std::vector<std::string>& more) {
  std::vector<std::string> overrides = {
      "model.encoders.vision.type=vision", "model.encoders.vision.image_size=128",
      "model.encoders.vision.hidden_size=128", "model.encoders.vision.intermediate_size=512",
      "model.encoders.audio.type=audio", "model.encoders.audio.num_frames=512",
      "model.encoders.audio.hidden_size=128", "model.encoders.audio.intermediate_size=512",
      "model.llm.hidden_size=256", "model.llm.num_heads=8", "model.llm.num_kv_heads=4",
      "model.llm.intermediate_size=704", "data.seq_len=1024", "train.precision=" + precision};
  overrides.insert(overrides.end(), more.begin(), more.end());
  return ParseConfig("train: {steps: 10}\noptimizer: {warmup_steps: 2}\n", "memory-test.yaml", overrides);
}

double HeldBytes() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<double>(m.uordblks + m.hblkhd);
}

std::vector<double> HeldPerLayer(MultimodalModel& model, const Batch& batch, Communicator* tp, Precision precision,
                                 bool llm_stand_in) {
  const ModelSpec& spec = model.spec();
  const int head = spec.chains[spec.llm_chain()].end - 1;
  std::vector<double> held(spec.layers.size(), 0.0);
  for (int pass = 0; pass < 2; ++pass) {
    std::fill(held.begin(), held.end(), 0.0);
    ForwardContext ctx = model.MakeContext(batch);
    ctx.tp_group = tp;
    for (int c = 0; c <= spec.llm_chain(); ++c) {
      const bool llm = c == spec.llm_chain();
      torch::Tensor x = llm ? torch::Tensor() : batch.modalities[c].inputs;  // this loop's: the last output
      int begin = spec.chains[c].begin, end = spec.chains[c].end;
      if (llm && llm_stand_in) {
        x = torch::randn(model.OutputSizes(begin, batch)).requires_grad_(true);
        ++begin, --end;
      }
      for (int i = begin; i < end; ++i) {
        const double before = HeldBytes();
        torch::Tensor in = std::move(x);
        {
          const AutocastGuard autocast(torch::kCPU, {precision == Precision::kBf16, torch::kBFloat16});
          x = i == head ? model.HeadLossSum(in, batch, tp) : model.RunLayer(i, in, ctx);
        }
        held[i] = HeldBytes() - before;
        // The input, once this loop lets go of it, is freed unless a graph keeps it: then it was not held on its
        // producer's account.
        const double with_input = HeldBytes();
        in = torch::Tensor();
        if (i > begin) held[i - 1] -= with_input - HeldBytes();
        if (i > begin && !spec.layers[i - 1].needs_graph) held[i] += std::exchange(held[i - 1], 0.0);
      }
      if (!llm) ctx.features.push_back(x);  // the executor keeps a tower's output: its message
      // x holds the graph, so it cannot be let go of here to see.
      if (llm && llm_stand_in) held[end - 1] -= static_cast<double>(x.storage().nbytes());
    }
  }
  return held;
}

}  // namespace cornstarch
