// Every collective and point-to-point operation of the MPI communicator with exactly predictable results.
// Run under `mpirun -np 2` and `-np 4` (tests/dist/mpirun_test.sh).
#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include "cornstarch/dist/mpi_communicator.h"
#include "cornstarch/dist/runtime.h"

using namespace cornstarch;

namespace {

Communicator& World() {
  static std::unique_ptr<Communicator> world = MakeMpiWorldCommunicator(60.0);
  return *world;
}

const std::vector<at::ScalarType> kTypes = {at::kFloat, at::kDouble, at::kLong, at::kInt,
                                            at::kHalf,  at::kBFloat16, at::kByte};

}  // namespace

TEST_CASE("allreduce sum, avg and max give the closed forms for every dtype", "[comm]") {
  Communicator& w = World();
  const int n = w.size(), r = w.rank();
  REQUIRE(n >= 2);
  for (at::ScalarType type : kTypes) {
    INFO("dtype " << type);
    at::Tensor t = at::full({3, 5}, r + 1, at::TensorOptions().dtype(type));
    w.AllReduce(t, ReduceOp::kSum);
    CHECK(at::equal(t, at::full({3, 5}, n * (n + 1) / 2, at::TensorOptions().dtype(type))));
    at::Tensor m = at::arange(7, at::TensorOptions().dtype(type)) * (r == n - 1 ? 2 : 1);
    w.AllReduce(m, ReduceOp::kMax);
    CHECK(at::equal(m, at::arange(7, at::TensorOptions().dtype(type)) * 2));
  }
  at::Tensor avg = at::full({4}, static_cast<double>(r), at::kDouble);
  w.AllReduce(avg, ReduceOp::kAvg);
  CHECK(at::allclose(avg, at::full({4}, (n - 1) / 2.0, at::kDouble)));
}

TEST_CASE("allgather places rank r's input in slice r", "[comm]") {
  Communicator& w = World();
  const int n = w.size(), r = w.rank();
  for (at::ScalarType type : kTypes) {
    const at::Tensor in = at::full({2, 3}, r, at::TensorOptions().dtype(type)) + at::arange(6, at::TensorOptions().dtype(type)).view({2, 3});
    at::Tensor out = at::empty({n, 2, 3}, at::TensorOptions().dtype(type));
    w.AllGather(in, out);
    for (int p = 0; p < n; ++p) {
      CHECK(at::equal(out[p], at::full({2, 3}, p, at::TensorOptions().dtype(type)) +
                                  at::arange(6, at::TensorOptions().dtype(type)).view({2, 3})));
    }
  }
}

TEST_CASE("reducescatter gives rank r the reduction of every rank's slice r", "[comm]") {
  Communicator& w = World();
  const int n = w.size(), r = w.rank();
  for (at::ScalarType type : kTypes) {
    INFO("dtype " << type);
    const auto options = at::TensorOptions().dtype(type);
    // Rank p contributes p + j at flat position j: slice q of the sum is n * (q * 4 + i) + n (n - 1) / 2.
    const at::Tensor in = at::arange(n * 4, options) + at::full({n * 4}, r, options);
    at::Tensor out = at::empty({4}, options);
    w.ReduceScatter(in, out, ReduceOp::kSum);
    CHECK(at::equal(out, at::arange(4, options) * n + at::full({4}, n * r * 4 + n * (n - 1) / 2, options)));
    w.ReduceScatter(in, out, ReduceOp::kMax);
    CHECK(at::equal(out, at::arange(4, options) + at::full({4}, r * 4 + n - 1, options)));
  }
  at::Tensor avg = at::empty({2}, at::kDouble);
  w.ReduceScatter(at::full({n * 2}, static_cast<double>(r), at::kDouble), avg, ReduceOp::kAvg);
  CHECK(at::allclose(avg, at::full({2}, (n - 1) / 2.0, at::kDouble)));
}

TEST_CASE("non-blocking collectives in flight together complete with the blocking forms' results", "[comm]") {
  Communicator& w = World();
  const int n = w.size(), r = w.rank();
  // Three operations started before any is waited for, then waited in reverse order; the half tensor's result and
  // the average's division arrive with Wait, not before.
  at::Tensor sum = at::full({5}, r + 1, at::kBFloat16);
  at::Tensor avg = at::full({3}, static_cast<double>(r), at::kDouble);
  const at::Tensor in = at::arange(n * 2, at::kFloat) + static_cast<float>(r);
  at::Tensor scattered = at::empty({2}, at::kFloat);
  std::unique_ptr<Work> a = w.IAllReduce(sum, ReduceOp::kSum);
  std::unique_ptr<Work> b = w.IAllReduce(avg, ReduceOp::kAvg);
  std::unique_ptr<Work> c = w.IReduceScatter(in, scattered, ReduceOp::kSum);
  c->Wait();
  b->Wait();
  a->Wait();
  CHECK(at::equal(sum, at::full({5}, n * (n + 1) / 2, at::kBFloat16)));
  CHECK(at::allclose(avg, at::full({3}, (n - 1) / 2.0, at::kDouble)));
  CHECK(at::equal(scattered, at::arange(2, at::kFloat) * n + static_cast<float>(n * r * 2 + n * (n - 1) / 2)));
  at::Tensor gathered = at::empty({n}, at::kLong);
  w.IAllGather(at::full({1}, r * 10, at::kLong), gathered)->Wait();  // the input is held until completion
  CHECK(at::equal(gathered, at::arange(n, at::kLong) * 10));
}

TEST_CASE("broadcast from the last rank reaches everyone", "[comm]") {
  Communicator& w = World();
  const int root = w.size() - 1;
  at::Tensor t = w.rank() == root ? at::arange(10, at::kLong) * 3 : at::zeros({10}, at::kLong);
  w.Broadcast(t, root);
  CHECK(at::equal(t, at::arange(10, at::kLong) * 3));
  w.Barrier();
}

TEST_CASE("send/recv around a ring keeps dtype, shape and values", "[comm]") {
  Communicator& w = World();
  const int n = w.size(), r = w.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const std::vector<std::vector<int64_t>> shapes = {{1}, {5, 7}, {2, 3, 4}, {0}, {1000, 33}};
  int tag = 0;
  for (at::ScalarType type : kTypes) {
    for (const auto& shape : shapes) {
      INFO("dtype " << type << " shape " << at::IntArrayRef(shape));
      auto payload = [&](int from) {
        const int64_t numel = at::empty(shape).numel();
        return (at::arange(numel, at::kDouble).remainder(100) + from).to(type).view(shape);
      };
      const at::Tensor out = payload(r);
      at::Tensor in = at::empty(shape, at::TensorOptions().dtype(type));
      auto send = w.ISend(out, next, tag);
      w.Recv(in, prev, tag);
      send->Wait();
      CHECK(at::equal(in, payload(prev)));
      ++tag;
    }
  }
  // Non-blocking receive posted before the matching send.
  at::Tensor in = at::empty({4}, at::kFloat);
  auto recv = w.IRecv(in, prev, 99);
  w.Send(at::full({4}, static_cast<float>(r), at::kFloat), next, 99);
  recv->Wait();
  CHECK(at::equal(in, at::full({4}, static_cast<float>(prev), at::kFloat)));
}

TEST_CASE("split groups by color, ordered by key, and reduce within the group only", "[comm]") {
  Communicator& w = World();
  const int n = w.size(), r = w.rank();
  std::unique_ptr<Communicator> parity = w.Split(r % 2, -r, "parity");  // reversed order within the group
  const int members = (n - r % 2 + 1) / 2;
  CHECK(parity->size() == members);
  CHECK(parity->rank() == members - 1 - r / 2);
  at::Tensor t = at::full({1}, static_cast<int64_t>(r), at::kLong);
  parity->AllReduce(t, ReduceOp::kSum);
  int64_t expected = 0;
  for (int p = r % 2; p < n; p += 2) expected += p;
  CHECK(t.item<int64_t>() == expected);
}

TEST_CASE("the runtime's axis groups follow ParallelDims", "[comm][runtime]") {
  const LaunchEnv env = DetectLaunchEnv();
  ParallelConfig parallel;
  parallel.pp = env.world_size / 2;
  parallel.dp = 2;
  parallel.timeout_seconds = 60;
  int argc = 0;
  DistRuntime rt(parallel, env, &argc, nullptr);
  for (Axis axis : {Axis::kPP, Axis::kDP}) {
    INFO("axis " << AxisName(axis));
    const std::vector<int> ranks = rt.dims().GroupRanks(rt.rank(), axis);
    Communicator& g = rt.group(axis);
    CHECK(g.size() == static_cast<int>(ranks.size()));
    CHECK(g.rank() == rt.coord()[axis]);
    at::Tensor t = at::full({1}, static_cast<int64_t>(rt.rank()), at::kLong);
    g.AllReduce(t, ReduceOp::kSum);
    int64_t expected = 0;
    for (int p : ranks) expected += p;
    CHECK(t.item<int64_t>() == expected);
  }
}
