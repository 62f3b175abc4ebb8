#include "cornstarch/dist/mpi_communicator.h"

#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>
#include <vector>

#include "cornstarch/base/check.h"
#include "cornstarch/base/logging.h"

namespace cornstarch {

namespace {

void MpiCheck(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(text, len));
}

MPI_Datatype MpiType(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kShort: return MPI_INT16_T;
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kBool: return MPI_C_BOOL;
    case at::kHalf:
    case at::kBFloat16: return MPI_UINT16_T;  // moved as bits; reductions go through float
    default: CS_CHECK(false, "no MPI type for ", t.scalar_type());
  }
  return MPI_DATATYPE_NULL;
}

void CheckCpuContiguous(const at::Tensor& t, const char* op) {
  CS_CHECK(t.defined() && t.device().is_cpu() && t.is_contiguous(), op, ": MPI needs a contiguous CPU tensor");
}

class MpiCommunicator;

// Polls requests until done or the communicator's timeout expires, then reports and aborts. `peer`: the group
// rank a point-to-point operation waits for; -1 for a collective, whose absent members a roll call finds.
void WaitRequests(const MpiCommunicator& comm, MPI_Request* requests, int count, const std::string& op, int peer = -1);

class MpiWork final : public Work {
 public:
  // `keep_alive`: the buffers the operation reads or writes; `then`: what completes the result once MPI is done
  // (an average's division, a copy out of a float buffer).
  MpiWork(const MpiCommunicator& comm, MPI_Request request, std::vector<at::Tensor> keep_alive, std::string op,
          int peer, std::function<void()> then = {})
      : comm_(comm), request_(request), tensors_(std::move(keep_alive)), op_(std::move(op)), peer_(peer),
        then_(std::move(then)) {}
  ~MpiWork() override {
    if (!done_) Wait();
  }
  void Wait() override {
    if (done_) return;
    WaitRequests(comm_, &request_, 1, op_, peer_);
    Complete();
  }
  void Progress() override {
    if (done_) return;
    int flag = 0;
    MpiCheck(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), op_.c_str());
    if (flag) Complete();
  }

 private:
  const MpiCommunicator& comm_;
  MPI_Request request_;
  std::vector<at::Tensor> tensors_;
  std::string op_;
  int peer_;
  std::function<void()> then_;
  bool done_ = false;

  void Complete() {
    done_ = true;
    if (then_) then_();
  }
};

// Half types travel as float: MPI has no reduction for them.
bool IsHalf(const at::Tensor& t) { return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16; }

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_seconds, bool owned)
      : comm_(comm), name_(std::move(name)), timeout_(timeout_seconds), owned_(owned) {
    MpiCheck(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    MpiCheck(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    // World rank of every member, for messages that must name processes a user can find.
    MPI_Group group, world;
    MpiCheck(MPI_Comm_group(comm_, &group), "MPI_Comm_group");
    MpiCheck(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
    std::vector<int> mine(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) mine[static_cast<size_t>(r)] = r;
    world_of_.resize(static_cast<size_t>(size_));
    MpiCheck(MPI_Group_translate_ranks(group, size_, mine.data(), world, world_of_.data()), "MPI_Group_translate_ranks");
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    // A communicator of its own for roll calls, so they never match the group's traffic.
    MpiCheck(MPI_Comm_dup(comm_, &roll_call_), "MPI_Comm_dup");
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Comm_free(&roll_call_);
    if (owned_) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  double timeout() const { return timeout_; }
  int world_rank() const { return world_rank_; }
  int world_of(int rank) const { return world_of_[static_cast<size_t>(rank)]; }

  // After a collective timed out: the members that do not answer within `grace` seconds (their world ranks).
  // Every live member that times out in the same collective calls this too, so they answer each other; a member
  // that is dead, stopped or stuck elsewhere does not.
  std::vector<int> RollCall(double grace) const {
    constexpr int kTag = 7;
    int me = rank_;
    std::vector<int> heard(static_cast<size_t>(size_), 0);
    std::vector<MPI_Request> sends, recvs(static_cast<size_t>(size_), MPI_REQUEST_NULL);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      sends.emplace_back();
      MPI_Isend(&me, 1, MPI_INT, r, kTag, roll_call_, &sends.back());
      MPI_Irecv(&heard[static_cast<size_t>(r)], 1, MPI_INT, r, kTag, roll_call_, &recvs[static_cast<size_t>(r)]);
    }
    std::vector<bool> answered(static_cast<size_t>(size_), false);
    answered[static_cast<size_t>(rank_)] = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace);
    while (std::chrono::steady_clock::now() < deadline) {
      bool all = true;
      for (int r = 0; r < size_; ++r) {
        if (answered[static_cast<size_t>(r)]) continue;
        int done = 0;
        MPI_Test(&recvs[static_cast<size_t>(r)], &done, MPI_STATUS_IGNORE);
        answered[static_cast<size_t>(r)] = done != 0;
        all = all && done != 0;
      }
      if (all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r) {
      if (!answered[static_cast<size_t>(r)]) missing.push_back(world_of(r));
    }
    return missing;  // the requests are left behind: the job aborts next
  }

  void Send(const at::Tensor& tensor, int dst, int tag) override { ISend(tensor, dst, tag)->Wait(); }
  void Recv(at::Tensor& tensor, int src, int tag) override { IRecv(tensor, src, tag)->Wait(); }

  std::unique_ptr<Work> ISend(const at::Tensor& tensor, int dst, int tag) override {
    CheckCpuContiguous(tensor, "send");
    CheckPeer(dst);
    MPI_Request req;
    MpiCheck(MPI_Isend(tensor.data_ptr(), Count(tensor), MpiType(tensor), dst, tag, comm_, &req), "MPI_Isend");
    return std::make_unique<MpiWork>(*this, req, std::vector<at::Tensor>{tensor},
                                     "send to " + Peer(dst) + " (tag " + std::to_string(tag) + ")", dst);
  }

  std::unique_ptr<Work> IRecv(at::Tensor& tensor, int src, int tag) override {
    CheckCpuContiguous(tensor, "recv");
    CheckPeer(src);
    MPI_Request req;
    MpiCheck(MPI_Irecv(tensor.data_ptr(), Count(tensor), MpiType(tensor), src, tag, comm_, &req), "MPI_Irecv");
    return std::make_unique<MpiWork>(*this, req, std::vector<at::Tensor>{tensor},
                                     "recv from " + Peer(src) + " (tag " + std::to_string(tag) + ")", src);
  }

  std::unique_ptr<Work> IAllReduce(at::Tensor& tensor, ReduceOp op) override {
    CheckCpuContiguous(tensor, "allreduce");
    at::Tensor buffer = IsHalf(tensor) ? tensor.to(at::kFloat) : tensor;
    if (op == ReduceOp::kAvg) {
      CS_CHECK(at::isFloatingType(buffer.scalar_type()), "allreduce avg needs a floating tensor");
    }
    MPI_Request req;
    MpiCheck(MPI_Iallreduce(MPI_IN_PLACE, buffer.data_ptr(), Count(buffer), MpiType(buffer), MpiOp(op), comm_, &req),
             "MPI_Iallreduce");
    return std::make_unique<MpiWork>(*this, req, std::vector<at::Tensor>{tensor, buffer}, "allreduce", -1,
                                     Finish(op, buffer, tensor));
  }

  std::unique_ptr<Work> IAllGather(const at::Tensor& input, at::Tensor& output) override {
    CheckCpuContiguous(input, "allgather");
    CheckCpuContiguous(output, "allgather");
    CS_CHECK(output.numel() == input.numel() * size_ && output.scalar_type() == input.scalar_type(),
             "allgather output must hold ", size_, " x ", input.numel(), " elements of the input's dtype");
    MPI_Request req;
    MpiCheck(MPI_Iallgather(input.data_ptr(), Count(input), MpiType(input), output.data_ptr(), Count(input),
                            MpiType(input), comm_, &req),
             "MPI_Iallgather");
    return std::make_unique<MpiWork>(*this, req, std::vector<at::Tensor>{input, output}, "allgather", -1);
  }

  std::unique_ptr<Work> IReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp op) override {
    CheckCpuContiguous(input, "reducescatter");
    CheckCpuContiguous(output, "reducescatter");
    CS_CHECK(input.numel() == output.numel() * size_ && output.scalar_type() == input.scalar_type(),
             "reducescatter input must hold ", size_, " x ", output.numel(), " elements of the output's dtype");
    const at::Tensor in = IsHalf(input) ? input.to(at::kFloat) : input;
    at::Tensor out = IsHalf(output) ? at::empty(output.sizes(), output.options().dtype(at::kFloat)) : output;
    if (op == ReduceOp::kAvg) {
      CS_CHECK(at::isFloatingType(out.scalar_type()), "reducescatter avg needs a floating tensor");
    }
    MPI_Request req;
    MpiCheck(MPI_Ireduce_scatter_block(in.data_ptr(), out.data_ptr(), Count(out), MpiType(out), MpiOp(op), comm_, &req),
             "MPI_Ireduce_scatter_block");
    return std::make_unique<MpiWork>(*this, req, std::vector<at::Tensor>{in, out, output}, "reducescatter", -1,
                                     Finish(op, out, output));
  }

  void Broadcast(at::Tensor& tensor, int root) override {
    CheckCpuContiguous(tensor, "broadcast");
    CheckPeer(root);
    MPI_Request req;
    MpiCheck(MPI_Ibcast(tensor.data_ptr(), Count(tensor), MpiType(tensor), root, comm_, &req), "MPI_Ibcast");
    WaitRequests(*this, &req, 1, "broadcast from " + Peer(root));
  }

  void Barrier() override {
    MPI_Request req;
    MpiCheck(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier");
    WaitRequests(*this, &req, 1, "barrier");
  }

  std::unique_ptr<Communicator> Split(int color, int key, const std::string& name) override {
    Barrier();  // MPI_Comm_split blocks without a timeout: make sure every rank has arrived first
    MPI_Comm sub;
    MpiCheck(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(sub, name, timeout_, true);
  }

 private:
  static int Count(const at::Tensor& t) {
    CS_CHECK(t.numel() <= std::numeric_limits<int>::max(), "tensor of ", t.numel(), " elements is too large for MPI");
    return static_cast<int>(t.numel());
  }
  // "world rank 3 (rank 1 of 'pp')": how a peer is named in messages.
  std::string Peer(int rank) const {
    return "world rank " + std::to_string(world_of(rank)) + " (rank " + std::to_string(rank) + " of '" + name_ + "')";
  }
  static MPI_Op MpiOp(ReduceOp op) { return op == ReduceOp::kMax ? MPI_MAX : MPI_SUM; }
  // What turns a reduction's `buffer` into the caller's `result`: the division of an average, the copy back of a
  // half tensor reduced in float.
  std::function<void()> Finish(ReduceOp op, at::Tensor buffer, at::Tensor result) const {
    const bool avg = op == ReduceOp::kAvg, copy = !buffer.is_same(result);
    if (!avg && !copy) return {};
    return [=, size = size_]() mutable {
      if (avg) buffer.div_(size);
      if (copy) result.copy_(buffer);
    };
  }
  void CheckPeer(int peer) const {
    CS_CHECK(peer >= 0 && peer < size_, name_, ": rank ", peer, " outside a group of ", size_);
  }

  MPI_Comm comm_;
  std::string name_;
  double timeout_;
  bool owned_;
  int rank_ = 0, size_ = 1, world_rank_ = 0;
  std::vector<int> world_of_;  // group rank -> world rank
  MPI_Comm roll_call_ = MPI_COMM_NULL;
};

void WaitRequests(const MpiCommunicator& comm, MPI_Request* requests, int count, const std::string& op, int peer) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration<double>(comm.timeout());
  for (long polls = 0;; ++polls) {
    int done = 0;
    MpiCheck(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE), op.c_str());
    if (done) return;
    // Spin briefly for latency, then back off so a waiting rank leaves the core to the others.
    if (polls > 2000) std::this_thread::sleep_for(std::chrono::microseconds(polls > 20000 ? 500 : 20));
    if (Clock::now() > deadline) {
      std::string who;
      if (peer >= 0) {
        who = "world rank " + std::to_string(comm.world_of(peer)) + " is stuck or dead";
      } else {
        // The live members time out too and answer; allow for their later arrival, up to 30 s.
        const std::vector<int> missing = comm.RollCall(std::min(comm.timeout(), 30.0));
        for (int w : missing) who += (who.empty() ? "" : ", ") + std::to_string(w);
        who = missing.empty() ? "every member answered a roll call afterwards; a peer is slow"
                              : "world rank" + std::string(missing.size() > 1 ? "s " : " ") + who +
                                    " did not arrive (stuck, stopped or dead)";
      }
      spdlog::critical("rank {}: {} on communicator '{}' (rank {} of {}) did not complete within {} s; {}. Aborting "
                       "the job.",
                       comm.world_rank(), op, comm.name(), comm.rank(), comm.size(), comm.timeout(), who);
      AbortJob(3);
    }
  }
}

}  // namespace

void InitMpi(int* argc, char*** argv) {
  if (MpiInitialized()) return;
  // More ranks on this node than cores (a CPU run under --oversubscribe): Open MPI's progress loop spins unless
  // told to yield, and a rank waiting in a collective then takes the core from one still computing. Measured with
  // bench/layout_bench, 4 ranks on 2 cores: the all-dp step 1.47 s spinning, 0.68 s yielding. A setting the user
  // made in the environment or with --mca wins. (Only Open MPI's launcher is read for the node's ranks.)
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const unsigned cores = std::thread::hardware_concurrency();
  if (local != nullptr && cores > 0 && std::strtol(local, nullptr, 10) > static_cast<long>(cores)) {
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", /*overwrite=*/0);
  }
  int provided = 0;
  MpiCheck(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
}

bool MpiInitialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  return initialized != 0;
}

std::unique_ptr<Communicator> MakeMpiWorldCommunicator(double timeout_seconds) {
  CS_CHECK(MpiInitialized(), "InitMpi first");
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, "world", timeout_seconds, false);
}

void AbortJob(int code) {
  spdlog::default_logger()->flush();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (MpiInitialized() && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace cornstarch
