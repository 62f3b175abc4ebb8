// Communication between the ranks of one group, over tensors. Implementations: MPI (CPU tensors), NCCL (CUDA
// tensors) and a single-process one, so the same code runs with and without a launcher.
//
// Every call names its operation; a call that does not complete within the communicator's timeout logs which
// rank and which operation is stuck and aborts the whole job (no rank waits forever).
// REQUIRES: tensors are contiguous; receive and collective outputs are preallocated with the right shape/dtype.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace cornstarch {

enum class ReduceOp { kSum, kAvg, kMax };

// A pending non-blocking operation. Wait() completes it (subject to the timeout); destroying an unwaited Work
// waits for it, so buffers are never released under an operation in flight.
class Work {
 public:
  virtual ~Work() = default;
  virtual void Wait() = 0;
  // Lets the operation advance without blocking. MPI moves a non-blocking collective along only inside MPI calls,
  // so a rank busy computing calls this now and then to keep it going; NCCL needs nothing (the GPU does it).
  virtual void Progress() {}
};

// One send or receive of a group that StartP2P posts together.
struct P2POp {
  enum Kind { kSend, kRecv } kind;
  at::Tensor tensor;  // a receive's buffer, preallocated
  int peer = 0;
  int tag = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "world", "dp", "pp", ...: used in timeout and error messages.
  virtual const std::string& name() const = 0;

  virtual void Send(const at::Tensor& tensor, int dst, int tag = 0) = 0;
  virtual void Recv(at::Tensor& tensor, int src, int tag = 0) = 0;
  virtual std::unique_ptr<Work> ISend(const at::Tensor& tensor, int dst, int tag = 0) = 0;
  virtual std::unique_ptr<Work> IRecv(at::Tensor& tensor, int src, int tag = 0) = 0;

  // Posts `ops` as one group and returns their Works, in order. NCCL issues them between ncclGroupStart and
  // ncclGroupEnd: their completion then does not depend on their order within the group, so a rank that sends and
  // receives in the same step cannot block on either alone (NCCL buffers no send). Elsewhere: each as ISend/IRecv.
  virtual std::vector<std::unique_ptr<Work>> StartP2P(const std::vector<P2POp>& ops);
  // True where sends and receives take tensors on the training device as they are (NCCL: CUDA tensors); false
  // where they take host tensors (MPI).
  virtual bool takes_device_tensors() const { return false; }

  // In place over every rank's `tensor`.
  void AllReduce(at::Tensor& tensor, ReduceOp op) { IAllReduce(tensor, op)->Wait(); }
  // `output` has size() * input.numel() elements: rank r's input lands in the r-th slice of dim 0.
  void AllGather(const at::Tensor& input, at::Tensor& output) { IAllGather(input, output)->Wait(); }
  // The inverse shape: `input` has size() * output.numel() elements, and rank r's `output` is the reduction over
  // every rank of the r-th slice of `input` (dim 0). What a sharded optimizer or sequence parallelism sums with.
  void ReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) {
    IReduceScatter(input, output, op)->Wait();
  }
  // The same collectives started without waiting: the result is in place once the Work is waited for. Every rank
  // starts a communicator's collectives in the same order; the blocking forms above are these plus Wait(), so a
  // sum is bitwise the same whichever form computed it.
  virtual std::unique_ptr<Work> IAllReduce(at::Tensor& tensor, ReduceOp op) = 0;
  virtual std::unique_ptr<Work> IAllGather(const at::Tensor& input, at::Tensor& output) = 0;
  virtual std::unique_ptr<Work> IReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) = 0;
  virtual void Broadcast(at::Tensor& tensor, int root) = 0;
  virtual void Barrier() = 0;

  // Collective over this communicator: ranks passing the same `color` form one new communicator, ordered by
  // `key` (then by rank here). Every rank must call it.
  virtual std::unique_ptr<Communicator> Split(int color, int key, const std::string& name) = 0;
};

// The communicator of a process that runs alone (rank 0 of 1): collectives are identities, point-to-point is an
// error (there is nobody to talk to).
std::unique_ptr<Communicator> MakeSingleProcessCommunicator();

}  // namespace cornstarch
