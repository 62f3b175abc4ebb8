#include "cornstarch/plan/cost_model.h"

#include <cmath>

#include "cornstarch/base/check.h"
#include "cornstarch/plan/encoder_kind.h"
#include "cornstarch/plan/image_grid.h"

namespace cornstarch {

double InstanceLoad::Tokens(const EncoderConfig& e) const {
  return tokens >= 0 ? tokens : static_cast<double>(EncoderTokens(e));
}

double InstanceLoad::Sequence(const EncoderConfig& e) const {
  return tokens >= 0 ? tokens : static_cast<double>(EncoderSequence(e));  // images at their own size: no class token
}

InstanceLoad LoadOf(const std::vector<InstanceLoad>& loads, int c) {
  return c < static_cast<int>(loads.size()) ? loads[c] : InstanceLoad{};
}

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
        const InstanceLoad load = LoadOf(instances, c);
        const double nominal = static_cast<double>(EncoderTokens(e)), d = static_cast<double>(e.hidden_size);
        const double t = load.Tokens(e);
        if (pos == 0) {
          f = KindOf(e.type).embedding_flops(e) * t / nominal;  // per token: the patch product
        } else if (pos == last) {
          const double out = static_cast<double>(model.llm.hidden_size);
          f = 2 * t * d * out + (e.projector.type == ProjectorType::kMlp ? 2 * t * out * out : 0);
        } else if (pos == last - 1) {
          f = 5 * t * d;  // LayerNorm
        } else {
          const double n = load.Sequence(e);
          const double pairs = load.pairs >= 0 ? load.pairs : n * n;
          f = TransformerBlockFlops(n, d, static_cast<double>(e.intermediate_size), d, d, pairs, 2);
        }
      }
      flops[i] = f;
    }
  }
  return flops;
}

namespace {

// Bytes one instance's embedding layer leaves held: the input's bf16 cast (saved by the first convolution), each
// GELU's input and, where a convolution follows, its output (saved by that convolution), the output (fp32, as the
// residual stream is) and a pre-norm's output. A convolution's output without GELU is only read by the next op.
// Adds the convolutions' parameters to `cast` (autocast's bf16 copies of them are held once per microbatch).
double EmbeddingBytes(const EncoderConfig& e, bool bf16, double& cast) {
  const EncoderKind& kind = KindOf(e.type);
  const EmbeddingRecipe r = kind.embedding(e);
  const std::vector<int64_t> input = kind.input_shape(e);
  const double low = bf16 ? 2 : 4;
  double elements = 1;
  for (int64_t x : input) elements *= static_cast<double>(x);
  double bytes = bf16 ? 2 * elements : 0;
  // A packed tower's embedding is one product over rows of patches ([patches, C * P * P]), whose input needs no
  // gradient: no bf16 copy of its weight is kept. Its learned positions, the table resized to each image's grid,
  // are kept by the copy that packs them as the patches are (measured). Else convolutions over [C, spatial...].
  const double tokens = static_cast<double>(EncoderSequence(e)), d = static_cast<double>(e.hidden_size);
  if (PackedTower(e) && r.positions == EmbeddingRecipe::Positions::kLearned) bytes += 4 * tokens * d;
  std::vector<int64_t> spatial(input.begin() + 1, input.end());
  for (size_t i = 0; i < r.convs.size() && !PackedTower(e); ++i) {
    const EmbeddingRecipe::Conv& c = r.convs[i];
    cast += static_cast<double>(c.out) * (static_cast<double>(c.in) * std::pow(c.kernel, c.dims) + (c.bias ? 1 : 0));
    double out = static_cast<double>(c.out);
    for (int64_t& x : spatial) x = (x + 2 * c.padding - c.kernel) / c.stride + 1, out *= static_cast<double>(x);
    if (c.gelu) bytes += low * out * (i + 1 < r.convs.size() ? 2 : 1);
  }
  return bytes + 4 * tokens * d + (r.pre_norm ? 4 * tokens * d : 0);
}

}  // namespace

std::vector<LayerMemory> EstimateLayerMemory(const ModelConfig& model, const ModelSpec& spec, int64_t seq_len,
                                             int64_t micro_batch_size, int64_t tp, bool sequence_parallel,
                                             Precision precision, double labelled_tokens,
                                             const std::vector<InstanceLoad>& instances, int64_t cp) {
  std::vector<LayerMemory> out(spec.layers.size());
  const double b = static_cast<double>(micro_batch_size);
  const double t = static_cast<double>(tp);
  const bool bf16 = precision == Precision::kBf16;
  const double labelled = labelled_tokens < 0 ? static_cast<double>(seq_len) : labelled_tokens;
  // Per sample: the encoders' features the LLM embedding keeps as the source of the copy that places them, where
  // that source is a tensor of its own: in one process, features it widens to fp32 (bf16) or picks out of a packed
  // tower's rows; under sequence parallelism every encoder's, on one rank of the group (measured; the estimate is
  // the fullest rank's); at tp > 1 without it, none. A cp rank picks its own tokens' share, in fp32.
  double placed_tokens = 0;
  for (int k = 0; k < static_cast<int>(model.encoders.size()); ++k) {
    const EncoderConfig& e = model.encoders[k];
    const InstanceLoad load = LoadOf(instances, k);
    if (cp > 1) {
      placed_tokens += load.Instances() * load.Tokens(e) / static_cast<double>(cp);
    } else if (sequence_parallel || (tp == 1 && (bf16 || PackedTower(e)))) {
      placed_tokens += load.Instances() * load.Tokens(e);
    }
  }
  for (int c = 0; c < static_cast<int>(spec.chains.size()); ++c) {
    const ChainSpec& chain = spec.chains[c];
    const int last = chain.end - 1 - chain.begin;
    for (int i = chain.begin; i < chain.end; ++i) {
      const int pos = i - chain.begin;
      const bool recompute = spec.layers[i].recompute;
      // params: all of the layer's; cast: those autocast copies to bf16 for a product (not norms, embeddings or
      // the fused loss's head), whose copies the graph keeps. bytes: what one microbatch's forward leaves held.
      // working: the most its backward allocates at once above that (the gradients it makes on the way).
      double params = 0, cast = 0, bytes = 0, working = 0;
      if (c == spec.llm_chain()) {
        const LlmConfig& l = model.llm;
        const double d = static_cast<double>(l.hidden_size), v = static_cast<double>(l.vocab_size);
        const double heads = static_cast<double>(l.num_heads);
        const double q = d, kv = static_cast<double>(l.num_kv_heads * (l.hidden_size / l.num_heads));
        const double ff = static_cast<double>(l.intermediate_size);
        const double tokens = b * static_cast<double>(seq_len);
        // Under tensor parallelism a rank holds 1/tp of the heads, the SwiGLU width and the vocabulary; the
        // hidden-width tensors (norms, residuals, messages) stay whole, or are 1/tp under sequence parallelism.
        const double whole = sequence_parallel ? d / t : d;
        if (pos == 0) {
          params = v * d / t;
          bytes = 4 * tokens * whole + 4 * b * placed_tokens * d;  // the output, and the features kept
          working = 8 * tokens * d;
        } else if (pos == last) {
          // The fused loss (model/lm_loss.h): per labelled row the norm's input, output and scaled rows and the
          // input's gradient (frozen: three of them, measured); per microbatch the head's weight gradient, made in
          // the forward.
          params = d + d * v / t;
          const bool trained = spec.layers[i].trainable;
          bytes = 4 * b * labelled * (trained ? 4 : 3) * d + (trained ? 4 * v * d / t : 0);
          if (sequence_parallel) bytes += 4 * tokens * d;  // the gathered input, every row
          working = 4 * tokens * d;  // the input's gradient, every row
        } else {
          cast = (d * q + 2 * d * kv + q * d + 3 * d * ff + (l.attention_bias ? q + 2 * kv : 0)) / t;
          params = 2 * d + cast;
          // Measured (tests/model/model_test.cc): fp32 eight hidden-width tensors, three of the query width, the
          // keys after RoPE and the values, four of the SwiGLU width, the attention's log-sum-exp; bf16 the products'
          // inputs in bf16, the attention's in fp32, the SwiGLU in bf16. Frozen (a graph only to pass gradients
          // back, as in LLaVA's first stage): no product keeps its input nor a norm its normalised rows, as no
          // weight gradient needs them; four hidden-width tensors, two of the query width, one SwiGLU-wide tensor
          // fewer. Recomputed: the output only.
          double wide = 16, split = bf16 ? 8 * q + 8 * kv + 6 * ff + 4 * heads : 4 * (2 * q + 2 * kv + 3 * ff + heads);
          if (spec.layers[i].trainable) {
            wide = bf16 ? 34 : 32;
            split = bf16 ? 10 * q + 8 * kv + 8 * ff + 4 * heads : 4 * (3 * q + 2 * kv + 4 * ff + heads);
          }
          // Context parallelism: the attention keeps the keys and values of the whole sequence (fp32), gathered
          // from the other ranks, besides its own.
          const double whole_sequence = 4 * tokens * static_cast<double>(cp - 1) * 2 * kv / t;
          const double saved = tokens * (wide * whole + split / t) + whole_sequence;
          // The output, held by the next block's graph; not before the head, which keeps the labelled rows (under
          // sequence parallelism it normalises this rank's piece before gathering it).
          const double output = pos + 1 == last && !sequence_parallel ? 0 : 4 * tokens * whole;
          // Under sequence parallelism the products' inputs are gathered whole: the attention's and the MLP's
          // (fp32), or their casts for each product (bf16: three and two).
          const double gathered =
              sequence_parallel && spec.layers[i].trainable ? tokens * (bf16 ? 10 : 8) * (d - whole) : 0;
          bytes = recompute ? output : saved - 4 * tokens * whole + output + gathered;
          // Measured: three SwiGLU-wide gradients and two of the query width at once, in fp32 also under autocast;
          // recomputed, on top of what its forward saves again first.
          working = 4 * tokens * (3 * ff + 2 * q) / t + (recompute ? saved : 0);
        }
      } else {
        const EncoderConfig& e = model.encoders[c];
        const double d = static_cast<double>(e.hidden_size), ff = static_cast<double>(e.intermediate_size);
        const double o = static_cast<double>(model.llm.hidden_size);
        const double et = e.tp ? t : 1;  // a sharded tower's blocks and projector hold 1/tp of their width
        // Everything an instance holds is per token of it, apart from the weights' bf16 copies (per microbatch).
        const InstanceLoad load = LoadOf(instances, c);
        const double n = b * load.Instances(), per = load.Tokens(e);
        const double tokens = n * per;
        // CLIP's class token dropped with no norm after the blocks: the projector reads a strided slice.
        const bool sliced = !e.post_norm && EncoderSequence(e) > EncoderTokens(e);
        if (pos == 0) {
          params = KindOf(e.type).embedding_parameters(e);
          bytes = n * EmbeddingBytes(e, bf16, cast) * per / static_cast<double>(EncoderTokens(e));
          working = 8 * tokens * d;
        } else if (pos == last) {
          const bool mlp = e.projector.type == ProjectorType::kMlp;
          params = (mlp ? (d * o + o + o * o) / et : d * o / et) + o;
          cast = params;
          // The MLP's first product's input (bf16: its cast), its output and GELU's (split), the output (whole);
          // a lone product's input is the norm's output, or its split cast in bf16.
          const double low = bf16 ? 2 : 4;
          bytes = tokens * (mlp ? (bf16 ? 2 * d : 0) + 2 * low * o / et + low * o : (bf16 ? 2 * d / et : 0) + low * o);
          working = 8 * tokens * o / et;
          if (!spec.layers[i].trainable) {
            // Frozen, passing gradients back to its tower: no product keeps its input, GELU its own.
            bytes = tokens * ((mlp ? low * o / et : 0) + low * o);
          } else if (!spec.layers[i - 1].needs_graph) {
            // After a tower without a graph its input needs no gradient: the first product keeps its input (in
            // fp32 the norm's output, which no graph counts before) but not its weight's bf16 copy.
            if (!bf16) bytes += 4 * tokens * d;
            cast -= d * o / et;
          } else if (sliced && !bf16) {
            bytes += 4 * tokens * d;  // the first product keeps a contiguous copy of the slice it reads
          }
        } else if (pos == last - 1) {
          params = e.post_norm ? 2 * d : 0;
          // The output, where a trained projector's first product keeps it (fp32; in bf16 it keeps its cast).
          bytes = e.post_norm && spec.layers[i + 1].trainable && !bf16 ? 4 * tokens * d : 0;
          working = 8 * tokens * d;
        } else {
          const double seq = n * load.Sequence(e);
          // The output projection's and second MLP product's biases are whole (row-parallel).
          cast = (3 * d * d + 3 * d + d * d + d * ff + ff + ff * d) / et + 2 * d;
          params = 4 * d + cast;
          // Measured like the LLM's: fp32 four hidden-width tensors whole, q/k/v and the attention's output (one
          // storage of 3d, and d) and the MLP before and after GELU split, and the softmax's probabilities (heads x
          // sequence per token); bf16 likewise, in bf16 where products made them. A packed tower's bitfield kernel
          // keeps instead a log-sum-exp per head, q/k/v in fp32 (bf16: widened copies) and its own output beside
          // the output projection's input; with 2-D RoPE in fp32 the rotated q and k besides q/k/v's storage.
          // Recomputed: the output only.
          const double pairs = static_cast<double>(e.num_heads) * (PackedTower(e) ? 1 : EncoderSequence(e));
          double split = bf16 ? 8 * d + 4 * ff + 2 * pairs : 4 * (4 * d + 2 * ff + pairs);
          if (PackedTower(e)) {
            const bool rope = e.dynamic_positions == VisionPositions::kRope2d;
            split = bf16 ? 18 * d + 4 * ff + 4 * pairs : 4 * ((rope ? 7 : 5) * d + 2 * ff + pairs);
          }
          const double saved = seq * ((bf16 ? 12 : 16) * d + split / et);
          // The last block's output where the projector reads a strided slice of it: no graph keeps it.
          const double output = pos == last - 2 && sliced ? 4 * seq * d : 0;
          bytes = (recompute ? 4 * seq * d : saved) - output;
          // Measured: the gradients of both MLP widths, of q/k/v and of the probabilities at once; recomputed, on
          // top of what its forward saves again first.
          working = (bf16 ? 2 : 4) * seq * (2 * ff + 2 * d + pairs) / et + (recompute ? saved : 0);
        }
      }
      out[i].parameters = params;
      // bf16: autocast's copy of each cast weight, kept by the graph once per microbatch (by a recomputed layer's
      // only while its backward runs).
      const double copies = bf16 ? 2 * cast : 0;
      out[i].activation_bytes = spec.layers[i].needs_graph ? bytes + (recompute ? 0 : copies) : 0;
      out[i].backward_bytes = spec.layers[i].needs_graph ? working + (recompute ? copies : 0) : 0;
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
