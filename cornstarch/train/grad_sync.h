// The step's gradient sums over data and context parallelism. Gradients are flattened into buckets
// (plan/grad_buckets.h) and each bucket is summed over the dp replicas in one call: all-reduced, or with a sharded
// optimizer reduce-scattered so that each replica receives only the sums of the slice it updates; the cp ranks of a
// replica (which computed the gradients of different tokens) then add up what they hold.
//
// Overlap: a hook after each parameter's gradient accumulation (train/grad_hooks.h) counts the gradients of the
// stage's last backward; a bucket whose gradients are all in starts its reduction at once, while backward goes on
// with earlier layers. Buckets start strictly in order, the same order on every rank (a collective must be),
// so a bucket waits for the ones before it; whatever has not started when backward ends (parameters the last
// microbatch gave no gradient) starts in Finish. The sums are the same calls on the same buffers either way, so
// overlapped and post-hoc synchronisation give bitwise the same gradients.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cornstarch/plan/grad_buckets.h"

namespace cornstarch {

class Communicator;
class GradAccumulatedHook;
class Work;

class GradSync {
 public:
  // `params`: the trainable parameters in model order. `shard`: reduce-scatter over dp and own 1/dp of every
  // bucket (ZeRO-1). `overlap`: start buckets during the last backward (see above). The communicators are not
  // owned; `dp` may be NCCL when the gradients live on a GPU. `bf16`: buckets are summed in bf16 and widened
  // back into the fp32 gradients (or shards) afterwards.
  GradSync(std::vector<at::Tensor> params, int64_t bucket_bytes, Communicator& dp, Communicator& cp, bool shard,
           bool overlap, bool bf16 = false);
  ~GradSync();

  // The gradients accumulated from now on complete the step (call before the stage's last backward).
  void Arm();
  // Starts every bucket not yet started, waits for all and sums over cp. Afterwards grads() hold the step's sums.
  void Finish();

  // What the optimizer updates: whole parameters, or (sharded) this rank's slices of them.
  const std::vector<ParamSlice>& slices() const { return slices_; }
  // The summed gradient of each slice, shaped like the slice's view of its parameter (undefined: no gradient).
  std::vector<at::Tensor> grads() const;
  // Sums of the squared gradient entries of the whole stage (in fp64; with sharding, over the dp group): of the
  // parameters marked in `tp_split` (tensor-parallel slices, which the caller adds up over the tp group) and of
  // the rest (whole on every tp rank, to be counted once). `tp_split` is per parameter; empty: none is split.
  std::pair<double, double> SquaredNorms(const std::vector<bool>& tp_split) const;
  // After the optimizer updated this rank's slices in place, gives every replica every slice (sharded only).
  void GatherParams();
  // Zeroes the parameters' accumulated gradients for the next step.
  void ZeroGrad();

  // Per bucket of the last Finish: when its reduction started and when Finish found it complete
  // (TraceRecorder::NowUs; completion is seen only there, so the span's end is an upper bound).
  const std::vector<std::pair<double, double>>& bucket_spans() const { return spans_; }
  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  // How many buckets of the last Finish had started during backward, and how long Finish took (the part of the
  // synchronisation that backward did not hide).
  int overlapped_buckets() const { return overlapped_; }
  double finish_seconds() const { return finish_seconds_; }

 private:
  void OnAccumulated(int param);
  void LaunchReady();
  void Launch(int bucket);

  std::vector<at::Tensor> params_;
  Communicator& dp_;
  Communicator& cp_;
  const bool shard_;
  const bool bf16_;
  std::vector<GradBucket> buckets_;
  std::vector<ParamSlice> slices_;
  std::vector<int> bucket_of_;  // parameter -> bucket
  std::vector<std::unique_ptr<GradAccumulatedHook>> hooks_;
  // Per step: which parameters' last gradients are in, how many each bucket still waits for, the next bucket to
  // start, and each started bucket's buffers and reduction.
  bool armed_ = false;
  std::vector<bool> ready_;
  std::vector<int> pending_;
  int next_ = 0;
  int started_early_ = 0, overlapped_ = 0;
  double finish_seconds_ = 0;
  std::vector<at::Tensor> flat_, shard_buffer_;
  std::vector<std::unique_ptr<Work>> work_;
  std::vector<std::pair<double, double>> spans_;
};

}  // namespace cornstarch
