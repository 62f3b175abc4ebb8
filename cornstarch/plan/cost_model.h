// Frozen-aware cost of each layer (Cornstarch paper, section 3.1): forward F from a FLOP estimate for the
// configured shapes, backward B = 2F for a trainable layer (input and weight gradients), B = F for a frozen layer
// that must still pass a gradient to something trainable before it, B = 0 for a frozen layer with nothing
// trainable upstream. Pure: profiled forward times, when measured, replace the estimate through the same struct.
#pragma once

#include <vector>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/model_spec.h"

namespace cornstarch {

struct LayerCost {
  double forward = 0;   // FLOPs (or seconds, when profiled) of one microbatch's forward
  double backward = 0;  // the same unit, frozen-aware
  double total() const { return forward + backward; }
};

// Forward FLOPs of every layer of `spec` for one sample of `seq_len` LLM tokens (encoder inputs per their config).
// LLM attention counts `llm_attention_pairs` allowed (query, key) pairs per sample, by default the causal half of
// the score matrix; the trainer passes the pairs its batches' bitfield masks actually allow. The LM head counts
// `labelled_tokens` rows of logits per sample (training computes only those), by default all seq_len.
// Encoder layers count one instance of `instances[k]` for encoder k where given (images at their own resolution:
// the mean tokens and attention pairs of the images seen, exact for a sum since both enter linearly), else of
// the config's fixed input.
struct InstanceLoad {
  double tokens = -1;      // through the tower and into the projector; < 0: the config's
  double pairs = -1;       // (query, key) pairs of its attention; < 0: tokens squared
  double per_sample = -1;  // instances per LLM sample, for a microbatch's cost (plan/planner.h); < 0: one

  // The fields as used, defaults filled in: instances per sample; tokens into the projector; tokens the blocks
  // attend over (CLIP's class token too, where the config's size is taken).
  double Instances() const { return per_sample >= 0 ? per_sample : 1; }
  double Tokens(const EncoderConfig& e) const;
  double Sequence(const EncoderConfig& e) const;
};
// Encoder c's entry of `loads`, or one config-sized instance per sample where it has none.
InstanceLoad LoadOf(const std::vector<InstanceLoad>& loads, int c);

std::vector<double> EstimateForwardFlops(const ModelConfig& model, const ModelSpec& spec, int64_t seq_len,
                                         double llm_attention_pairs = -1, double labelled_tokens = -1,
                                         const std::vector<InstanceLoad>& instances = {});

// What one layer costs in memory, for placement: its parameters, and the bytes one microbatch's forward leaves
// held until its backward: the tensors saved for backward and the output where the next layer's graph keeps it (a
// layer's input is its producer's, or after a layer without a graph its own), under autocast (`precision` bf16)
// also the bf16 copies of its weights; 0 without an autograd graph. Its backward allocates gradients on the way
// while the saved tensors are still held: `backward_bytes` is the most at once (an LLM block's about a third of
// what it holds; a recomputed layer's includes what its forward saves again), which a rank needs on top of what it
// holds when that backward starts. Coefficients measured against the allocator for fp32 and bf16, whole and at
// tp = 2, with every layer trained, the towers and the LLM frozen, the projectors frozen, or every block
// recomputed (tests/model/model_test.cc), in a tp = 2 group with and without sequence parallelism
// (tests/train/tp_parity_test.cc), and with several instances per sample, images at their own resolution included.
// The LM head holds per labelled row (`labelled_tokens` per sample; < 0: every token); an encoder's layers per
// token of what the data holds (`instances` as for EstimateForwardFlops: instances per sample and their mean tokens;
// empty: one config-sized instance). Per rank of a tensor-parallel group of `tp` ranks (encoders split only where
// model.encoders.<name>.tp says; the fullest rank's where ranks differ) and of a context-parallel group of `cp`
// ranks, each with `seq_len` LLM tokens per sample (the sequence's 1/cp; measured at cp = 2 and 4 in
// tests/context/cp_attention_test.cc): its towers run on whole samples, its attention keeps the whole sequence's
// keys and values (fp32), and its embedding the features it picks for its tokens.
struct LayerMemory {
  double parameters = 0;
  double activation_bytes = 0;
  double backward_bytes = 0;
};

std::vector<LayerMemory> EstimateLayerMemory(const ModelConfig& model, const ModelSpec& spec, int64_t seq_len,
                                             int64_t micro_batch_size, int64_t tp = 1,
                                             bool sequence_parallel = false, Precision precision = Precision::kFp32,
                                             double labelled_tokens = -1,
                                             const std::vector<InstanceLoad>& instances = {}, int64_t cp = 1);

// Applies the backward rule to per-layer forward costs.
std::vector<LayerCost> FrozenAwareCosts(const ModelSpec& spec, const std::vector<double>& forward);

// The frozen-unaware baseline: every layer costs B = 2F, as LLM-centric trainers assume.
std::vector<LayerCost> FrozenUnawareCosts(const std::vector<double>& forward);

}  // namespace cornstarch
