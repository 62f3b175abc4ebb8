#include "cornstarch/dist/nccl_communicator.h"

#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <thread>

#include "cornstarch/dist/mpi_communicator.h"
#include "cornstarch/base/check.h"
#include "cornstarch/base/logging.h"

#define CS_CUDA_CHECK(call)                                                                            \
  do {                                                                                                 \
    const cudaError_t err_ = (call);                                                                   \
    CS_CHECK(err_ == cudaSuccess, #call, ": ", cudaGetErrorString(err_));                              \
  } while (0)

#define CS_NCCL_CHECK(call)                                                                            \
  do {                                                                                                 \
    const ncclResult_t res_ = (call);                                                                  \
    CS_CHECK(res_ == ncclSuccess || res_ == ncclInProgress, #call, ": ", ncclGetErrorString(res_));    \
  } while (0)

namespace cornstarch {

int NcclDataType(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return ncclFloat32;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kDouble: return ncclFloat64;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    case at::kChar: return ncclInt8;
    case at::kByte:
    case at::kBool: return ncclUint8;
    default: CS_CHECK(false, "NCCL cannot move tensors of type ", type);
  }
  return -1;
}

int NcclVersion() {
  int version = 0;
  CS_NCCL_CHECK(ncclGetVersion(&version));
  return version;
}

namespace {

class NcclCommunicator;

// Waits for `event` (recorded after the operation on the communicator's stream) under the timeout.
void WaitEvent(NcclCommunicator& comm, cudaEvent_t event, const std::string& op);

class NcclWork final : public Work {
 public:
  NcclWork(NcclCommunicator& comm, cudaEvent_t event, std::vector<at::Tensor> keep_alive, std::string op)
      : comm_(comm), event_(event), tensors_(std::move(keep_alive)), op_(std::move(op)) {}
  ~NcclWork() override {
    if (!done_) Wait();
    cudaEventDestroy(event_);
  }
  void Wait() override {
    if (done_) return;
    WaitEvent(comm_, event_, op_);
    done_ = true;
  }

 private:
  NcclCommunicator& comm_;
  cudaEvent_t event_;
  std::vector<at::Tensor> tensors_;
  std::string op_;
  bool done_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, std::string name, double timeout)
      : comm_(comm), device_(device), name_(std::move(name)), timeout_(timeout) {
    CS_CUDA_CHECK(cudaSetDevice(device_));
    CS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CS_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    CS_NCCL_CHECK(ncclCommCount(comm_, &size_));
  }
  ~NcclCommunicator() override {
    cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  double timeout() const { return timeout_; }
  ncclComm_t comm() const { return comm_; }

  void Send(const at::Tensor& t, int dst, int tag) override { ISend(t, dst, tag)->Wait(); }
  void Recv(at::Tensor& t, int src, int tag) override { IRecv(t, src, tag)->Wait(); }

  std::unique_ptr<Work> ISend(const at::Tensor& t, int dst, int) override {
    Check(t, "send");
    CS_NCCL_CHECK(ncclSend(t.data_ptr(), t.numel(), Type(t), dst, comm_, stream_));
    return Record(t, "send to rank " + std::to_string(dst));
  }
  std::unique_ptr<Work> IRecv(at::Tensor& t, int src, int) override {
    Check(t, "recv");
    CS_NCCL_CHECK(ncclRecv(t.data_ptr(), t.numel(), Type(t), src, comm_, stream_));
    return Record(t, "recv from rank " + std::to_string(src));
  }

  std::unique_ptr<Work> IAllReduce(at::Tensor& t, ReduceOp op) override {
    Check(t, "allreduce");
    CS_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), Type(t), Op(op), comm_, stream_));
    return Record(t, "allreduce");
  }
  std::unique_ptr<Work> IAllGather(const at::Tensor& input, at::Tensor& output) override {
    Check(input, "allgather");
    Check(output, "allgather");
    CS_CHECK(output.numel() == input.numel() * size_, "allgather output must hold ", size_, " x ", input.numel());
    CS_NCCL_CHECK(ncclAllGather(input.data_ptr(), output.data_ptr(), input.numel(), Type(input), comm_, stream_));
    return Record(output, "allgather");
  }
  std::unique_ptr<Work> IReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    Check(input, "reducescatter");
    Check(output, "reducescatter");
    CS_CHECK(input.numel() == output.numel() * size_, "reducescatter input must hold ", size_, " x ", output.numel());
    CS_NCCL_CHECK(
        ncclReduceScatter(input.data_ptr(), output.data_ptr(), output.numel(), Type(input), Op(op), comm_, stream_));
    return Record(output, "reducescatter", input);
  }
  void Broadcast(at::Tensor& t, int root) override {
    Check(t, "broadcast");
    CS_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), Type(t), root, comm_, stream_));
    Record(t, "broadcast from rank " + std::to_string(root))->Wait();
  }
  void Barrier() override {
    at::Tensor one = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device_));
    IAllReduce(one, ReduceOp::kSum)->Wait();
  }
  std::unique_ptr<Communicator> Split(int color, int key, const std::string& name) override {
    ncclComm_t sub = nullptr;
    CS_NCCL_CHECK(ncclCommSplit(comm_, color, key, &sub, nullptr));
    return std::make_unique<NcclCommunicator>(sub, device_, name, timeout_);
  }

 private:
  // Also orders the operation after the work LibTorch queued on the default stream (which produced `t`): the
  // communicator's stream is non-blocking, so nothing else makes it wait.
  void Check(const at::Tensor& t, const char* op) {
    CS_CHECK(t.defined() && t.is_cuda() && t.is_contiguous(), name_, " ", op, ": NCCL needs a contiguous CUDA tensor");
    cudaEvent_t ready;
    CS_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CS_CUDA_CHECK(cudaEventRecord(ready, cudaStreamLegacy));
    CS_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    CS_CUDA_CHECK(cudaEventDestroy(ready));
  }
  static ncclRedOp_t Op(ReduceOp op) {
    return op == ReduceOp::kSum ? ncclSum : op == ReduceOp::kAvg ? ncclAvg : ncclMax;
  }
  static ncclDataType_t Type(const at::Tensor& t) { return static_cast<ncclDataType_t>(NcclDataType(t.scalar_type())); }
  // `t` and `also` stay alive until the operation completes (the caller may drop its references first).
  std::unique_ptr<Work> Record(const at::Tensor& t, std::string op, const at::Tensor& also = {}) {
    cudaEvent_t event;
    CS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    CS_CUDA_CHECK(cudaEventRecord(event, stream_));
    return std::make_unique<NcclWork>(*this, event, std::vector<at::Tensor>{t, also}, std::move(op));
  }

  ncclComm_t comm_;
  int device_;
  std::string name_;
  double timeout_;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0, size_ = 1;
};

void WaitEvent(NcclCommunicator& comm, cudaEvent_t event, const std::string& op) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::duration<double>(comm.timeout());
  for (;;) {
    const cudaError_t state = cudaEventQuery(event);
    if (state == cudaSuccess) return;
    CS_CHECK(state == cudaErrorNotReady, op, ": ", cudaGetErrorString(state));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm.comm(), &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      spdlog::critical("{} on NCCL communicator '{}' (rank {} of {}) failed: {}. Aborting the job.", op, comm.name(),
                       comm.rank(), comm.size(), ncclGetErrorString(async));
      ncclCommAbort(comm.comm());
      AbortJob(3);
    }
    if (Clock::now() > deadline) {
      spdlog::critical("{} on NCCL communicator '{}' (rank {} of {}) did not complete within {} s. Aborting the job.",
                       op, comm.name(), comm.rank(), comm.size(), comm.timeout());
      ncclCommAbort(comm.comm());
      AbortJob(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace

std::unique_ptr<Communicator> MakeNcclCommunicator(Communicator& bootstrap, int device, double timeout_seconds,
                                                   const std::string& name) {
  CS_CUDA_CHECK(cudaSetDevice(device));
  ncclUniqueId id;
  at::Tensor bytes = at::zeros({static_cast<int64_t>(sizeof(id))}, at::kByte);
  if (bootstrap.rank() == 0) {
    CS_NCCL_CHECK(ncclGetUniqueId(&id));
    std::memcpy(bytes.data_ptr(), &id, sizeof(id));
  }
  bootstrap.Broadcast(bytes, 0);
  std::memcpy(&id, bytes.data_ptr(), sizeof(id));
  ncclComm_t comm = nullptr;
  CS_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()));
  return std::make_unique<NcclCommunicator>(comm, device, name, timeout_seconds);
}

}  // namespace cornstarch
