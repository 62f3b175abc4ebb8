#include "cornstarch/dist/nccl_communicator.h"

#include <ATen/ATen.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "cornstarch/device/cuda_stream.h"
#include "cornstarch/dist/mpi_communicator.h"
#include "cornstarch/dist/watchdog.h"
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

// A completion event, shared by an operation's Work and the watchdog that polls it (either may outlive the other).
struct CudaEvent {
  cudaEvent_t event = nullptr;
  CudaEvent() { CS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming)); }
  ~CudaEvent() { cudaEventDestroy(event); }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<CudaEvent> done, int device, std::vector<at::Tensor> keep_alive)
      : done_(std::move(done)), device_(device), tensors_(std::move(keep_alive)) {}
  ~NcclWork() override {
    if (!waited_) Wait();
  }
  // LibTorch's current stream waits for the operation on the device; the host goes on (the watchdog ends the job
  // if the operation never completes). The tensors may then be released: LibTorch's allocator hands their memory
  // out again only to work on the current stream, which now runs after the operation.
  void Wait() override {
    if (waited_) return;
    CS_CUDA_CHECK(cudaStreamWaitEvent(CurrentCudaStream(c10::Device(c10::kCUDA, device_)), done_->event, 0));
    waited_ = true;
  }

 private:
  std::shared_ptr<CudaEvent> done_;
  int device_;
  std::vector<at::Tensor> tensors_;
  bool waited_ = false;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int device, std::string name, double timeout)
      : comm_(comm), device_(device), name_(std::move(name)), timeout_(timeout) {
    CS_CUDA_CHECK(cudaSetDevice(device_));
    CS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CS_NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
    CS_NCCL_CHECK(ncclCommCount(comm_, &size_));
    watchdog_ = std::make_unique<Watchdog>(
        timeout_, [this](const std::string& what) { Abort(what); }, [device] { cudaSetDevice(device); });
  }
  ~NcclCommunicator() override {
    watchdog_.reset();  // stops polling before the communicator goes
    cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

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

  std::vector<std::unique_ptr<Work>> StartP2P(const std::vector<P2POp>& ops) override {
    for (const P2POp& op : ops) Check(op.tensor, op.kind == P2POp::kSend ? "send" : "recv");
    CS_NCCL_CHECK(ncclGroupStart());
    for (const P2POp& op : ops) {
      const at::Tensor& t = op.tensor;
      if (op.kind == P2POp::kSend) {
        CS_NCCL_CHECK(ncclSend(t.data_ptr(), t.numel(), Type(t), op.peer, comm_, stream_));
      } else {
        CS_NCCL_CHECK(ncclRecv(t.data_ptr(), t.numel(), Type(t), op.peer, comm_, stream_));
      }
    }
    CS_NCCL_CHECK(ncclGroupEnd());
    std::vector<std::unique_ptr<Work>> works;
    for (const P2POp& op : ops) {
      works.push_back(Record(op.tensor, (op.kind == P2POp::kSend ? "send to rank " : "recv from rank ") +
                                            std::to_string(op.peer) + " (in a group of " +
                                            std::to_string(ops.size()) + ")"));
    }
    return works;
  }
  bool takes_device_tensors() const override { return true; }

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
  // The host waits here (a barrier is for the host); the watchdog still ends a barrier some rank never reaches.
  void Barrier() override {
    at::Tensor one = at::ones({1}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA, device_));
    IAllReduce(one, ReduceOp::kSum)->Wait();
    CS_CUDA_CHECK(cudaStreamSynchronize(CurrentCudaStream(c10::Device(c10::kCUDA, device_))));
  }
  std::unique_ptr<Communicator> Split(int color, int key, const std::string& name) override {
    ncclComm_t sub = nullptr;
    CS_NCCL_CHECK(ncclCommSplit(comm_, color, key, &sub, nullptr));
    return std::make_unique<NcclCommunicator>(sub, device_, name, timeout_);
  }

 private:
  // Also orders the operation after the work LibTorch queued on its current stream (which produced `t`): the
  // communicator's own stream (where operations overlap that work) is non-blocking, so nothing else makes it wait.
  void Check(const at::Tensor& t, const char* op) {
    CS_CHECK(t.defined() && t.is_cuda() && t.is_contiguous(), name_, " ", op, ": NCCL needs a contiguous CUDA tensor");
    const CudaEvent ready;
    CS_CUDA_CHECK(cudaEventRecord(ready.event, CurrentCudaStream(t.device())));
    CS_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready.event, 0));
  }
  static ncclRedOp_t Op(ReduceOp op) {
    return op == ReduceOp::kSum ? ncclSum : op == ReduceOp::kAvg ? ncclAvg : ncclMax;
  }
  static ncclDataType_t Type(const at::Tensor& t) { return static_cast<ncclDataType_t>(NcclDataType(t.scalar_type())); }
  // `t` and `also` stay alive until the operation completes (the caller may drop its references first).
  std::unique_ptr<Work> Record(const at::Tensor& t, std::string op, const at::Tensor& also = {}) {
    auto done = std::make_shared<CudaEvent>();
    CS_CUDA_CHECK(cudaEventRecord(done->event, stream_));
    watchdog_->Watch(std::move(op), [this, done] {
      const cudaError_t state = cudaEventQuery(done->event);
      if (state == cudaSuccess) return Watchdog::Status{Watchdog::State::kDone, {}};
      if (state != cudaErrorNotReady) return Watchdog::Status{Watchdog::State::kFailed, cudaGetErrorString(state)};
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        return Watchdog::Status{Watchdog::State::kFailed, ncclGetErrorString(async)};
      }
      return Watchdog::Status{};
    });
    return std::make_unique<NcclWork>(std::move(done), device_, std::vector<at::Tensor>{t, also});
  }
  [[noreturn]] void Abort(const std::string& what) {
    spdlog::critical("{} on NCCL communicator '{}' (rank {} of {}). Aborting the job.", what, name_, rank_, size_);
    ncclCommAbort(comm_);
    AbortJob(3);
  }

  ncclComm_t comm_;
  int device_;
  std::string name_;
  double timeout_;
  cudaStream_t stream_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::unique_ptr<Watchdog> watchdog_;
};

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
