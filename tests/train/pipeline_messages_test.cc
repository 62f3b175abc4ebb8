// The pipeline's messages as NCCL sees them, checked on CPU. The pp group is wrapped in a recording communicator
// that claims to take device tensors, as NCCL does: the executor then takes its NCCL path (no header messages,
// tensors sent from where they are, each schedule step's sends and receives posted as one StartP2P group, the
// grouped schedule's dry run before the first step) while MPI underneath still moves the bytes. The recorder
// rejects a tensor that is not on the training device (no host copy on the path) or not contiguous, and afterwards
// the test checks, per rank:
// - every StartP2P call is exactly one CommGroup of the pipeline rank's schedule, its operations in the schedule's
//   order with the ranks of the schedule's peer stages, and no send or receive bypasses the groups;
// - every message travels in the precision's wire dtype (fp32, or bf16 under train.precision=bf16);
// and across the pp group: the n-th message rank a posts to rank b has the tag, shape and dtype of the n-th
// receive b posts from a (NCCL matches by order alone); and the run reproduces the single-process loss curve
// (1e-5 relative in fp32; bf16 as the layout parity test, whose measured tolerance it shares).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <sstream>

#include "cornstarch/base/check.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/train/trainer.h"
#include "tests/loss_curve.h"

using namespace cornstarch;
using cornstarch::testing::CheckSameCurve;

namespace {

struct Message {
  P2POp::Kind kind;
  int peer, tag;
  std::vector<int64_t> sizes;
  at::ScalarType dtype;
};

class RecordingCommunicator final : public Communicator {
 public:
  RecordingCommunicator(std::unique_ptr<Communicator> inner, c10::Device device)
      : inner_(std::move(inner)), device_(device) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const std::string& name() const override { return inner_->name(); }

  void Send(const at::Tensor& t, int dst, int tag) override { ++direct_; inner_->Send(t, dst, tag); }
  void Recv(at::Tensor& t, int src, int tag) override { ++direct_; inner_->Recv(t, src, tag); }
  std::unique_ptr<Work> ISend(const at::Tensor& t, int dst, int tag) override {
    ++direct_;
    return inner_->ISend(t, dst, tag);
  }
  std::unique_ptr<Work> IRecv(at::Tensor& t, int src, int tag) override {
    ++direct_;
    return inner_->IRecv(t, src, tag);
  }
  std::vector<std::unique_ptr<Work>> StartP2P(const std::vector<P2POp>& ops) override {
    std::vector<Message> call;
    for (const P2POp& op : ops) {
      CS_CHECK(op.tensor.device() == device_, "pp StartP2P: a tensor on ", op.tensor.device(),
               " where the stage trains on ", device_, " (a copy on the pipeline path)");
      CS_CHECK(op.tensor.is_contiguous(), "pp StartP2P: a tensor that is not contiguous");
      call.push_back({op.kind, op.peer, op.tag, op.tensor.sizes().vec(), op.tensor.scalar_type()});
    }
    calls_.push_back(std::move(call));
    return inner_->StartP2P(ops);
  }
  bool takes_device_tensors() const override { return true; }

  std::unique_ptr<Work> IAllReduce(at::Tensor& t, ReduceOp op) override { return inner_->IAllReduce(t, op); }
  std::unique_ptr<Work> IAllGather(const at::Tensor& in, at::Tensor& out) override {
    return inner_->IAllGather(in, out);
  }
  std::unique_ptr<Work> IReduceScatter(const at::Tensor& in, at::Tensor& out, ReduceOp op) override {
    return inner_->IReduceScatter(in, out, op);
  }
  void Broadcast(at::Tensor& t, int root) override { inner_->Broadcast(t, root); }
  void Barrier() override { inner_->Barrier(); }
  std::unique_ptr<Communicator> Split(int color, int key, const std::string& name) override {
    return inner_->Split(color, key, name);
  }

  const std::vector<std::vector<Message>>& calls() const { return calls_; }
  int direct() const { return direct_; }

 private:
  std::unique_ptr<Communicator> inner_;
  c10::Device device_;
  std::vector<std::vector<Message>> calls_;
  int direct_ = 0;
};

// Every rank's `text`, gathered over `group` (in rank order).
std::vector<std::string> AllGatherText(Communicator& group, const std::string& text) {
  torch::Tensor length = torch::full({1}, static_cast<int64_t>(text.size()), torch::kLong);
  torch::Tensor lengths = torch::zeros({group.size()}, torch::kLong);
  group.AllGather(length, lengths);
  const int64_t longest = lengths.max().item<int64_t>();
  torch::Tensor mine = torch::zeros({longest}, torch::kByte);
  std::memcpy(mine.data_ptr(), text.data(), text.size());
  torch::Tensor all = torch::zeros({group.size() * longest}, torch::kByte);
  group.AllGather(mine, all);
  std::vector<std::string> out;
  for (int r = 0; r < group.size(); ++r) {
    out.emplace_back(static_cast<const char*>(all.data_ptr()) + r * longest, lengths[r].item<int64_t>());
  }
  return out;
}

std::string Describe(const Message& m) {
  std::ostringstream s;
  s << "tag " << m.tag << " " << c10::IntArrayRef(m.sizes) << " " << m.dtype;
  return s.str();
}

struct Layout {
  std::string config;
  std::vector<std::string> overrides;
  double rtol = 1e-5;
};

std::vector<Layout> LayoutsFor(int world) {
  const std::string tiny = "configs/tiny.yaml", llava = "configs/tiny-llava.yaml";
  constexpr double kBf16Rtol = 3e-3;  // tests/train/layout_parity_test.cc: measured, with its reasons
  switch (world) {
    case 2:
      return {{tiny, {"parallel.pp=2"}},
              {llava, {"parallel.pp=2", "model.llm.frozen=true", "model.encoders.vision.frozen=false"}},
              {tiny, {"parallel.pp=2", "train.precision=bf16"}, kBf16Rtol},
              {tiny, {"parallel.pp=2", "parallel.pipeline=colocated",
                      "parallel.schedule_file=configs/schedules/gpipe-2x4.txt"}},
              {llava, {"parallel.pp=2", "parallel.schedule=interleaved", "parallel.virtual_stages=2"}}};
    case 3: return {{tiny, {"parallel.pp=3"}}};
    case 4:
      return {{llava, {"parallel.pp=4", "parallel.pipeline=uniform"}},
              {llava, {"parallel.pp=2", "parallel.cp=2", "parallel.cp_block=32"}},
              {tiny, {"parallel.pp=2", "parallel.dp=2"}},
              {llava, {"parallel.pp=4", "parallel.pipeline=colocated", "model.llm.num_layers=6",
                       "parallel.schedule=interleaved", "parallel.virtual_stages=2"}},
              {llava, {"parallel.pp=4", "parallel.schedule=interleaved", "parallel.virtual_stages=2"}}};
    default: FAIL("no pipeline layouts for " << world << " ranks"); return {};
  }
}

}  // namespace

TEST_CASE("pipeline messages on the NCCL path are the schedule's groups, matched in order across ranks", "[pp]") {
  const LaunchEnv env = DetectLaunchEnv();
  for (const Layout& layout : LayoutsFor(env.world_size)) {
    std::vector<std::string> overrides = {"train.steps=3", "optimizer.warmup_steps=1", "optimizer.lr=1e-3",
                                          "train.micro_batch_size=2", "train.global_batch_size=8",
                                          "train.num_threads=1", "logging.metrics_path=", "logging.level=warn",
                                          "parallel.timeout_seconds=120"};
    overrides.insert(overrides.end(), layout.overrides.begin(), layout.overrides.end());
    const Config cfg = LoadConfig(layout.config, overrides);
    std::string label = layout.config;
    for (const std::string& o : layout.overrides) label += " " + o;
    INFO(label);

    Config reference_cfg = cfg;
    reference_cfg.parallel.pp = reference_cfg.parallel.dp = reference_cfg.parallel.cp = 1;
    reference_cfg.parallel.schedule_file.clear();
    reference_cfg.parallel.schedule = ScheduleKind::k1F1B;
    reference_cfg.parallel.virtual_stages = 1;
    const std::vector<StepMetrics> expected = Trainer(reference_cfg).Run();

    DistRuntime runtime(cfg.parallel, env, nullptr, nullptr);
    RecordingCommunicator* recorder = nullptr;
    runtime.WrapGroup(Axis::kPP, [&](std::unique_ptr<Communicator> pp) {
      auto wrapped = std::make_unique<RecordingCommunicator>(std::move(pp), c10::Device(torch::kCPU));
      recorder = wrapped.get();
      return wrapped;
    });
    Trainer trainer(cfg, runtime);
    const int direct_before = recorder->direct();
    CheckSameCurve(trainer.Run(), expected, layout.rtol);
    CHECK(recorder->direct() == direct_before);

    // Each call is the next group of the rank's schedule, step after step.
    const int stage = runtime.coord().pp;  // its pipeline rank (several stages under interleaving)
    const std::vector<Action>& actions = trainer.plan().schedule[stage];
    const std::vector<CommGroup> groups = CommGroups(actions);
    REQUIRE(!groups.empty());
    REQUIRE(recorder->calls().size() == cfg.train.steps * groups.size());
    const at::ScalarType wire = EffectivePrecision(cfg.train) == Precision::kBf16 ? at::kBFloat16 : at::kFloat;
    std::ostringstream sends, recvs;  // "peer: message" lines, in posting order
    for (size_t c = 0; c < recorder->calls().size(); ++c) {
      const std::vector<Message>& call = recorder->calls()[c];
      const CommGroup& g = groups[c % groups.size()];
      REQUIRE(call.size() == static_cast<size_t>(g.end - g.begin));
      for (int i = g.begin; i < g.end; ++i) {
        const Action& a = actions[i];
        const Message& m = call[i - g.begin];
        INFO("call " << c << ": " << a.ToString());
        const bool send = a.type == ActionType::kSendF || a.type == ActionType::kSendB;
        CHECK(m.kind == (send ? P2POp::kSend : P2POp::kRecv));
        CHECK(m.peer == trainer.plan().graph.rank[a.peer]);
        CHECK(m.dtype == wire);
        (send ? sends : recvs) << stage << " " << m.peer << " " << Describe(m) << "\n";
      }
    }
    // Across the pp group: the n-th send a -> b and the n-th receive of b from a are the same message.
    Communicator& pp = runtime.group(Axis::kPP);
    const std::vector<std::string> all_sends = AllGatherText(pp, sends.str());
    const std::vector<std::string> all_recvs = AllGatherText(pp, recvs.str());
    std::map<std::pair<int, int>, std::vector<std::string>> sent, received;  // (from, to) -> messages
    for (int r = 0; r < pp.size(); ++r) {
      std::istringstream s(all_sends[r]), v(all_recvs[r]);
      for (std::string line; std::getline(s, line);) {
        std::istringstream f(line);
        int from, to;
        f >> from >> to;
        sent[{from, to}].push_back(line.substr(line.find(" tag")));
      }
      for (std::string line; std::getline(v, line);) {
        std::istringstream f(line);
        int to, from;
        f >> to >> from;
        received[{from, to}].push_back(line.substr(line.find(" tag")));
      }
    }
    CHECK(!sent.empty());
    CHECK(sent == received);
  }
}
