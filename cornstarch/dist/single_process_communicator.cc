#include "cornstarch/dist/communicator.h"
#include "cornstarch/base/check.h"

namespace cornstarch {

namespace {

class DoneWork final : public Work {
 public:
  void Wait() override {}
};

class SingleProcessCommunicator final : public Communicator {
 public:
  explicit SingleProcessCommunicator(std::string name) : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

  void Send(const at::Tensor&, int dst, int) override { NoPeer("send to", dst); }
  void Recv(at::Tensor&, int src, int) override { NoPeer("recv from", src); }
  std::unique_ptr<Work> ISend(const at::Tensor&, int dst, int) override { NoPeer("isend to", dst); }
  std::unique_ptr<Work> IRecv(at::Tensor&, int src, int) override { NoPeer("irecv from", src); }

  std::unique_ptr<Work> IAllReduce(at::Tensor&, ReduceOp) override { return std::make_unique<DoneWork>(); }
  std::unique_ptr<Work> IAllGather(const at::Tensor& input, at::Tensor& output) override {
    return Copy(input, output, "allgather");
  }
  std::unique_ptr<Work> IReduceScatter(const at::Tensor& input, at::Tensor& output, ReduceOp) override {
    return Copy(input, output, "reducescatter");
  }
  void Broadcast(at::Tensor&, int root) override { CS_CHECK(root == 0, "broadcast root ", root, " of 1 rank"); }
  void Barrier() override {}
  std::unique_ptr<Communicator> Split(int, int, const std::string& name) override {
    return std::make_unique<SingleProcessCommunicator>(name);
  }

 private:
  // A group of one gathers or scatters its own tensor.
  static std::unique_ptr<Work> Copy(const at::Tensor& input, at::Tensor& output, const char* op) {
    CS_CHECK(output.numel() == input.numel(), op, " output has ", output.numel(), " elements for ", input.numel());
    output.view(input.sizes()).copy_(input);
    return std::make_unique<DoneWork>();
  }
  [[noreturn]] void NoPeer(const char* what, int peer) {
    CS_CHECK(false, name_, ": ", what, " rank ", peer, " in a single-process communicator");
    __builtin_unreachable();
  }

  std::string name_;
};

}  // namespace

std::unique_ptr<Communicator> MakeSingleProcessCommunicator() {
  return std::make_unique<SingleProcessCommunicator>("world");
}

}  // namespace cornstarch
