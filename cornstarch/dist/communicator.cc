#include "cornstarch/dist/communicator.h"

namespace cornstarch {

std::vector<std::unique_ptr<Work>> Communicator::StartP2P(const std::vector<P2POp>& ops) {
  std::vector<std::unique_ptr<Work>> works;
  for (const P2POp& op : ops) {
    at::Tensor t = op.tensor;
    works.push_back(op.kind == P2POp::kSend ? ISend(t, op.peer, op.tag) : IRecv(t, op.peer, op.tag));
  }
  return works;
}

}  // namespace cornstarch
