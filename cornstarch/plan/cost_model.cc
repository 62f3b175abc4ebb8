#include "cornstarch/plan/cost_model.h"

#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

double TransformerBlockFlops(double tokens, double d, double ff, double attn_inner, double kv_inner, double pairs,
                             double mlp_matrices) {
  const double projections = 2 * tokens * d * (2 * attn_inner + 2 * kv_inner);
  const double attention = 4 * pairs * attn_inner;  // QK^T and PV over every query head
  const double mlp = 2 * tokens * d * ff * mlp_matrices;
  return projections + attention + mlp;
}

}  // namespace

std::vector<double> EstimateForwardFlops(const ModelConfig& model, const ModelSpec& spec, int64_t seq_len,
                                         double llm_attention_pairs, double labelled_tokens,
                                         const std::vector<InstanceLoad>& instances) {
  std::vector<double> flops(spec.layers.size(), 0.0);
  for (int c = 0; c < static_cast<int>(spec.chains.size()); ++c) {
    const ChainSpec& chain = spec.chains[c];
    const int last = chain.end - chain.begin - 1;
    for (int i = chain.begin; i < chain.end; ++i) {
      const int pos = i - chain.begin;
      double f = 0;
      if (c == spec.llm_chain()) {
        const LlmConfig& l = model.llm;
        const double s = static_cast<double>(seq_len), d = static_cast<double>(l.hidden_size);
        const double kv = static_cast<double>(l.num_kv_heads * (l.hidden_size / l.num_heads));
        if (pos == 0) f = s * d;  // embedding gather and scatter
        else if (pos == last) f = 2 * (labelled_tokens >= 0 ? labelled_tokens : s) * d * static_cast<double>(l.vocab_size);
        else {
          const double pairs = llm_attention_pairs >= 0 ? llm_attention_pairs : s * (s + 1) / 2;
          f = TransformerBlockFlops(s, d, static_cast<double>(l.intermediate_size), d, kv, pairs, 3);
        }
      } else {
        const EncoderConfig& e = model.encoders[c];
        const InstanceLoad load = c < static_cast<int>(instances.size()) ? instances[c] : InstanceLoad{};
        const double nominal = static_cast<double>(EncoderTokens(e)), d = static_cast<double>(e.hidden_size);
        const double t = load.tokens >= 0 ? load.tokens : nominal;
        if (pos == 0) {
          f = KindOf(e.type).embedding_flops(e) * t / nominal;  // per token: the patch product
        } else if (pos == last) {
          const double out = static_cast<double>(model.llm.hidden_size);
          f = 2 * t * d * out + (e.projector.type == ProjectorType::kMlp ? 2 * t * out * out : 0);
        } else if (pos == last - 1) {
          f = 5 * t * d;  // LayerNorm
        } else {
          const double n = load.tokens >= 0 ? t : static_cast<double>(EncoderSequence(e));  // CLIP's class token too
          const double pairs = load.pairs >= 0 ? load.pairs : n * n;
          f = TransformerBlockFlops(n, d, static_cast<double>(e.intermediate_size), d, d, pairs, 2);
        }
      }
      flops[i] = f;
    }
  }
  return flops;
}

std::vector<LayerMemory> EstimateLayerMemory(const ModelConfig& model, const ModelSpec& spec, int64_t seq_len,
                                             int64_t micro_batch_size, int64_t tp, bool sequence_parallel) {
  std::vector<LayerMemory> out(spec.layers.size());
  const double b = static_cast<double>(micro_batch_size);
  const double t = static_cast<double>(tp);
  for (int c = 0; c < static_cast<int>(spec.chains.size()); ++c) {
    const ChainSpec& chain = spec.chains[c];
    const int last = chain.end - chain.begin - 1;
    for (int i = chain.begin; i < chain.end; ++i) {
      const int pos = i - chain.begin;
      double params = 0, per_token = 0, tokens = 0;  // per_token: floats saved per token
      if (c == spec.llm_chain()) {
        const LlmConfig& l = model.llm;
        const double d = static_cast<double>(l.hidden_size), v = static_cast<double>(l.vocab_size);
        const double q = d, kv = static_cast<double>(l.num_kv_heads * (l.hidden_size / l.num_heads));
        const double ff = static_cast<double>(l.intermediate_size);
        tokens = b * static_cast<double>(seq_len);
        // Under tensor parallelism a rank holds 1/tp of the heads, the SwiGLU width and the vocabulary; the
        // hidden-width tensors (norms, residuals, messages) stay whole, or are 1/tp under sequence parallelism.
        const double whole = sequence_parallel ? d / t : d;
        if (pos == 0) {
          params = v * d / t, per_token = whole;
        } else if (pos == last) {
          // Norm in/out (under sequence parallelism its piece and the gathered rows), logits and their log-softmax.
          params = d + d * v / t, per_token = whole + d + 2 * v / t;
        } else {
          params = 2 * d + (d * q + 2 * d * kv + q * d + 3 * d * ff + (l.attention_bias ? q + 2 * kv : 0)) / t;
          // Recomputed: the input only; else norms, q/k/v before and after RoPE, output, MLP.
          per_token = spec.layers[i].recompute ? whole : 4 * whole + (2 * q + 3 * kv + q + 4 * ff) / t;
        }
      } else {
        const EncoderConfig& e = model.encoders[c];
        const double d = static_cast<double>(e.hidden_size), ff = static_cast<double>(e.intermediate_size);
        const double out = static_cast<double>(model.llm.hidden_size);
        const double et = e.tp ? t : 1;  // a sharded tower's blocks and projector hold 1/tp of their width
        tokens = b * static_cast<double>(EncoderTokens(e));
        if (pos == 0) {
          params = KindOf(e.type).embedding_parameters(e);
          per_token = 3 * d;
        } else if (pos == last) {
          const bool mlp = e.projector.type == ProjectorType::kMlp;
          params = mlp ? (d * out + out + out * out) / et + out : d * out / et + out;
          per_token = d + (mlp ? 2 * out / et : 0);
        } else if (pos == last - 1) {
          params = e.post_norm ? 2 * d : 0, per_token = d;
        } else {
          tokens = b * static_cast<double>(EncoderSequence(e));
          params = 6 * d + (3 * d * d + 3 * d + d * d + d * ff + ff + ff * d) / et;
          // Recomputed: the input only; else the norms' inputs and outputs and the residual (whole), and qkv, the
          // attention output and the MLP before and after GELU (split).
          per_token = spec.layers[i].recompute ? d : 5 * d + (5 * d + 2 * ff) / et;
        }
      }
      out[i].parameters = params;
      out[i].activation_bytes = spec.layers[i].needs_graph ? 4 * tokens * per_token : 0;
    }
  }
  return out;
}

std::vector<LayerCost> FrozenAwareCosts(const ModelSpec& spec, const std::vector<double>& forward) {
  CS_CHECK(forward.size() == spec.layers.size(), forward.size(), " costs for ", spec.layers.size(), " layers");
  std::vector<LayerCost> costs(forward.size());
  for (size_t i = 0; i < forward.size(); ++i) {
    const LayerSpec& l = spec.layers[i];
    costs[i].forward = forward[i];
    // needs_graph of a frozen layer is exactly "something trainable before it": it must pass gradients back.
    costs[i].backward = l.trainable ? 2 * forward[i] : l.needs_graph ? forward[i] : 0.0;
    if (l.recompute) costs[i].backward += forward[i];  // its forward runs again first
  }
  return costs;
}

std::vector<LayerCost> FrozenUnawareCosts(const std::vector<double>& forward) {
  std::vector<LayerCost> costs(forward.size());
  for (size_t i = 0; i < forward.size(); ++i) costs[i] = {forward[i], 2 * forward[i]};
  return costs;
}

}  // namespace cornstarch
