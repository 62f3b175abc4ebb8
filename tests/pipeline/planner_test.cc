#include <catch2/catch.hpp>
#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>

#include "cornstarch/plan/config.h"
#include "cornstarch/plan/layout_search.h"
#include "cornstarch/plan/planner.h"
#include "cornstarch/base/check.h"

using namespace cornstarch;

namespace {

// LLaVA-like: a frozen vision tower (trainable projector) about as heavy as the trainable LLM, as in the paper's
// models; optionally a frozen audio encoder with a frozen projector (no backward at all).
Config Llava(bool with_audio) {
  std::vector<std::string> o = {"model.encoders.vision.type=vision", "model.encoders.vision.num_layers=24",
                                "model.encoders.vision.hidden_size=256", "model.encoders.vision.intermediate_size=1024",
                                "model.encoders.vision.image_size=64", "model.encoders.vision.frozen=true",
                                "model.llm.num_layers=8", "data.seq_len=128"};
  if (with_audio) {
    for (const char* s : {"model.encoders.audio.type=audio", "model.encoders.audio.num_layers=12",
                          "model.encoders.audio.hidden_size=128", "model.encoders.audio.intermediate_size=512",
                          "model.encoders.audio.num_frames=64", "model.encoders.audio.frozen=true",
                          "model.encoders.audio.projector.frozen=true"}) {
      o.push_back(s);
    }
  }
  return ParseConfig("", "test.yaml", o);
}

std::vector<LayerCost> Costs(const Config& c, const ModelSpec& spec) {
  return FrozenAwareCosts(spec, EstimateForwardFlops(c.model, spec, c.data.seq_len));
}

}  // namespace

TEST_CASE("every plan places each layer exactly once, chains in order, on the requested stages", "[planner]") {
  for (bool audio : {false, true}) {
    const Config c = Llava(audio);
    const ModelSpec spec = BuildModelSpec(c.model);
    const std::vector<LayerCost> costs = Costs(c, spec);
    for (PlanMode mode : {PlanMode::kFrozenAware, PlanMode::kUniform, PlanMode::kColocated}) {
      for (int stages = 3; stages <= 6; ++stages) {
        INFO(NameOf(mode) << " stages " << stages << " audio " << audio);
        const PipelinePlan plan = PlanPipeline(spec, costs, stages, 8, mode);
        REQUIRE(static_cast<int>(plan.stages.size()) == stages);
        std::vector<int> seen;
        for (const StagePlan& s : plan.stages) {
          CHECK(!s.layers.empty());
          seen.insert(seen.end(), s.layers.begin(), s.layers.end());
        }
        std::vector<int> all(spec.layers.size());
        for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
        CHECK(seen == all);
        // Encoders on stages of their own (uniform always; frozen-aware when that simulates faster), or all on
        // the first LLM stage.
        if (!plan.encoder_stages.empty() || mode == PlanMode::kUniform) {
          CHECK(static_cast<int>(plan.encoder_stages.size()) == spec.llm_chain());
          for (int k : plan.encoder_stages) CHECK(k >= 1);
        } else {
          CHECK(plan.llm_stages == stages);
          CHECK(plan.stages[0].layers.front() == 0);
          CHECK(plan.stages[0].layers.size() > static_cast<size_t>(spec.chains.back().begin));
        }
        // A frozen encoder with a frozen projector has no backward at all.
        if (audio && !plan.encoder_stages.empty()) {
          const int audio_stage = plan.encoder_stages[0];
          CHECK_FALSE(plan.graph.has_backward[audio_stage]);
        }
      }
    }
  }
}

TEST_CASE("frozen-aware plans beat uniform layer counts and colocated encoders on LLaVA-like layouts", "[planner]") {
  for (bool audio : {false, true}) {
    const Config c = Llava(audio);
    const ModelSpec spec = BuildModelSpec(c.model);
    const std::vector<LayerCost> costs = Costs(c, spec);
    for (int stages : {4, 6}) {
      INFO("stages " << stages << " audio " << audio);
      const double aware = PlanPipeline(spec, costs, stages, 16, PlanMode::kFrozenAware).timeline.makespan;
      const double uniform = PlanPipeline(spec, costs, stages, 16, PlanMode::kUniform).timeline.makespan;
      const double colocated = PlanPipeline(spec, costs, stages, 16, PlanMode::kColocated).timeline.makespan;
      INFO("makespan aware " << aware << " uniform " << uniform << " colocated " << colocated);
      CHECK(aware <= uniform);
      CHECK(aware < colocated);
    }
  }
}

TEST_CASE("frozen-aware is never slower in simulation than either baseline", "[planner]") {
  for (bool audio : {false, true}) {
    const Config c = Llava(audio);
    const ModelSpec spec = BuildModelSpec(c.model);
    const std::vector<LayerCost> costs = Costs(c, spec);
    for (int stages = audio ? 3 : 2; stages <= 10; ++stages) {
      for (int m : {1, 4, 16}) {
        INFO("stages " << stages << " microbatches " << m << " audio " << audio);
        const double aware = PlanPipeline(spec, costs, stages, m, PlanMode::kFrozenAware).timeline.makespan;
        CHECK(aware <= PlanPipeline(spec, costs, stages, m, PlanMode::kUniform).timeline.makespan);
        CHECK(aware <= PlanPipeline(spec, costs, stages, m, PlanMode::kColocated).timeline.makespan);
      }
    }
  }
}

TEST_CASE("too few stages for separate encoder stages: uniform refuses, frozen-aware colocates", "[planner]") {
  const Config c = Llava(true);
  const ModelSpec spec = BuildModelSpec(c.model);
  CHECK_THROWS_WITH(PlanPipeline(spec, Costs(c, spec), 2, 4, PlanMode::kUniform),
                    "parallel.pp: uniform needs at least one stage per encoder and one for the LLM (3), got 2; "
                    "use more ranks or parallel.pipeline=frozen_aware or colocated");
  const PipelinePlan plan = PlanPipeline(spec, Costs(c, spec), 2, 4, PlanMode::kFrozenAware);
  CHECK(plan.encoder_stages.empty());
  CHECK(plan.stages.size() == 2);
  CHECK_THROWS_WITH(PlanPipeline(spec, Costs(c, spec), 100, 4, PlanMode::kFrozenAware),
                    "parallel.pp: 100 ranks cannot be filled: the chains have fewer layers");
}

TEST_CASE("frozen-aware placement is no worse than the colocated baseline with a heavy frozen encoder", "[planner]") {
  // A heavy frozen encoder: whether frozen-aware keeps it on stage 0 (then with fewer LLM layers there than the
  // count-based baseline) or gives it a stage of its own, the slowest stage and the step are no worse.
  const Config c = ParseConfig("", "test.yaml", {"model.encoders.vision.type=vision", "model.encoders.vision.num_layers=12",
                                                 "model.encoders.vision.hidden_size=256", "model.llm.num_layers=8",
                                                 "model.encoders.vision.frozen=true", "data.seq_len=128"});
  const ModelSpec spec = BuildModelSpec(c.model);
  const std::vector<LayerCost> costs = Costs(c, spec);
  const PipelinePlan baseline = PlanPipeline(spec, costs, 2, 8, PlanMode::kColocated);
  const PipelinePlan aware = PlanPipeline(spec, costs, 2, 8, PlanMode::kFrozenAware);
  CHECK(aware.timeline.makespan <= baseline.timeline.makespan);
  CHECK(aware.bottleneck <= baseline.bottleneck);
}

TEST_CASE("rank memory: weights, optimizer state of trainable layers, activations of in-flight microbatches", "[planner]") {
  const Config c = Llava(false);
  const ModelSpec spec = BuildModelSpec(c.model);
  const PipelinePlan plan = PlanPipeline(spec, Costs(c, spec), 3, 8, PlanMode::kUniform);
  std::vector<LayerMemory> memory(spec.layers.size());
  for (size_t l = 0; l < memory.size(); ++l) memory[l] = {1000.0 + static_cast<double>(l), 7.0, 3.0 + 0.5 * l};
  const std::vector<double> bytes = RankMemoryBytes(plan, spec, memory);
  REQUIRE(bytes.size() == 3);
  for (int s = 0; s < 3; ++s) {
    // 1F1B holds as many microbatches between forward and backward as there are stages to the loss.
    int depth = 1;
    for (int t = s; !plan.graph.next[t].empty(); t = plan.graph.next[t][0]) ++depth;
    const int in_flight = plan.graph.has_backward[s] ? std::min(8, depth) : 0;
    // The fullest moment is a backward's start: then its largest layer's (the stage's last) working gradients too.
    double expected = plan.graph.has_backward[s] ? memory[plan.stages[s].layers.back()].backward_bytes : 0;
    for (int l : plan.stages[s].layers) {
      expected += memory[l].parameters * (spec.layers[l].trainable ? 16 : 4) + in_flight * memory[l].activation_bytes;
    }
    INFO("stage " << s);
    CHECK(bytes[s] == Approx(expected));
  }
}

// The whole-layout search (plan/layout_search.h): what it returns can run, obeys the cluster, and the cost model
// composes its parts as it says: compute alone on a free network adds up the layer times, and communication time
// scales with 1 / bandwidth.
namespace {

Config Cluster(std::vector<std::string> more) {
  std::vector<std::string> o = {"model.encoders.vision.type=vision", "model.encoders.vision.frozen=true",
                                "model.llm.num_layers=8", "data.seq_len=128", "train.global_batch_size=16",
                                "cluster.gpus_per_node=4", "parallel.cp_block=32"};
  o.insert(o.end(), more.begin(), more.end());
  return ParseConfig("", "test.yaml", o);
}

}  // namespace

TEST_CASE("layout search: every candidate is valid, fits, stays in its node, and they are sorted", "[layout]") {
  const Config base = Cluster({});
  const std::vector<LayoutCost> all = SearchLayouts(base, 8);
  int candidates = 0, too_wide = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const LayoutCost& c = all[i];
    INFO(Describe(c.layout) << " " << c.rejected);
    CHECK(c.layout.ranks() == 8);
    if (!c.rejected.empty()) {
      too_wide += c.rejected.find("spans nodes") != std::string::npos;
      CHECK((c.layout.tp > 4 || c.rejected.find(':') != std::string::npos));
      continue;
    }
    ++candidates;
    CHECK(i + 1 == static_cast<size_t>(candidates));  // candidates first
    if (i > 0) CHECK(all[i - 1].step_seconds <= c.step_seconds);
    CHECK(c.layout.tp <= 4);
    CHECK_NOTHROW(Validate(WithLayout(base, c.layout)));
    CHECK(c.memory_bytes <= base.cluster.memory_gib * (1ull << 30));
    CHECK(c.step_seconds >= c.pipeline_seconds);
    CHECK((c.mfu > 0 && c.mfu < 1));
    CHECK(c.tokens_per_second == Approx(16.0 * 128 / c.step_seconds));
  }
  CHECK(candidates > 20);
  CHECK(too_wide > 0);  // tp = 8 on nodes of 4
  // Interleaving is among the candidates wherever there is a pipeline.
  CHECK(std::any_of(all.begin(), all.end(), [](const LayoutCost& c) {
    return c.rejected.empty() && c.layout.virtual_stages == 2 && c.layout.pp > 1;
  }));
  CHECK(std::none_of(all.begin(), all.end(), [](const LayoutCost& c) {
    return c.layout.virtual_stages > 1 && c.layout.pp == 1;
  }));
  // With too little memory for anything, every layout is rejected as out of memory.
  for (const LayoutCost& c : SearchLayouts(Cluster({"cluster.memory_gib=0.0001"}), 4)) {
    INFO(Describe(c.layout));
    CHECK_FALSE(c.rejected.empty());
  }
}

TEST_CASE("layout cost: compute on a free network adds up the layers; communication scales as 1 / bandwidth",
          "[layout]") {
  // A free network: no latency, bandwidth so high that bytes cost nothing measurable.
  const std::vector<std::string> free = {"cluster.latency_us=0", "cluster.intra_node_gbps=1e15",
                                         "cluster.inter_node_gbps=1e15", "cluster.memory_gib=1e6",
                                         "parallel.overlap_grad_sync=false"};
  const Config base = Cluster(free);
  const ModelSpec spec = BuildModelSpec(base.model);
  // dp = 4, one stage: the step is microbatches x the sum of every layer's forward and backward time.
  const Layout dp4{1, 1, 1, 4, 2, false, false, true};
  const LayoutCost dp = PredictLayout(base, dp4);
  REQUIRE(dp.rejected.empty());
  double per_microbatch = 0;
  for (const LayerCost& x : FrozenAwareCosts(spec, EstimateForwardFlops(base.model, spec, 128))) {
    per_microbatch += 2 * (x.forward + x.backward);  // two sequences per microbatch
  }
  const double rate = base.cluster.tflops * 1e12 * base.cluster.efficiency;
  const double microbatches = 16.0 / (2 * 4);
  CHECK(dp.step_seconds == Approx(microbatches * per_microbatch / rate).epsilon(1e-9));
  CHECK(dp.bubble == Approx(0).margin(1e-12));
  // A fixed cost per layer and microbatch: once in each forward, twice in each backward, whatever the micro-batch.
  std::vector<std::string> overhead = free;
  overhead.push_back("cluster.layer_overhead_us=100");
  double passes = 0;
  for (const LayerCost& x : FrozenAwareCosts(spec, EstimateForwardFlops(base.model, spec, 128))) {
    passes += x.backward > 0 ? 3 : 1;
  }
  CHECK(PredictLayout(Cluster(overhead), dp4).step_seconds - dp.step_seconds ==
        Approx(microbatches * passes * 100e-6).epsilon(1e-9));
  // With latency zero (and the gradient sum not overlapped, so none of it hides) the communication part (the step
  // minus the free network's) halves when every bandwidth doubles.
  const std::vector<std::string> slow = {"cluster.latency_us=0", "cluster.intra_node_gbps=2",
                                         "cluster.inter_node_gbps=1", "cluster.memory_gib=1e6",
                                         "parallel.overlap_grad_sync=false"};
  const std::vector<std::string> fast = {"cluster.latency_us=0", "cluster.intra_node_gbps=4",
                                         "cluster.inter_node_gbps=2", "cluster.memory_gib=1e6",
                                         "parallel.overlap_grad_sync=false"};
  for (const Layout& l : {Layout{2, 2, 2, 1, 2, false, true, true}, Layout{2, 1, 1, 4, 1, true, false, false},
                          Layout{1, 1, 1, 8, 2, false, false, true}}) {
    INFO(Describe(l));
    const LayoutCost at_free = PredictLayout(Cluster(free), l), at_slow = PredictLayout(Cluster(slow), l),
                     at_fast = PredictLayout(Cluster(fast), l);
    INFO(at_free.rejected << at_slow.rejected << at_fast.rejected);
    REQUIRE((at_free.rejected.empty() && at_slow.rejected.empty() && at_fast.rejected.empty()));
    CHECK(at_slow.step_seconds > at_fast.step_seconds);
    if (l.pp == 1) {  // one stage: no pipeline to reorder, so the communication adds up exactly
      CHECK(at_slow.step_seconds - at_free.step_seconds ==
            Approx(2 * (at_fast.step_seconds - at_free.step_seconds)).epsilon(1e-6));
    }
  }
}

TEST_CASE("layout cost: ranks sharing cores lend the pipeline's bubble to those computing", "[layout]") {
  // A free network, 4 ranks per node on 2 cores (s = 2). Every rank computes for a whole all-dp step: nothing
  // changes. A pipeline with 16 microbatches takes its mean busy time, all the work over the 4 ranks; with one
  // microbatch, whose stages run one after another, its critical path at a whole core's rate: half the makespan.
  const std::vector<std::string> free = {"cluster.latency_us=0", "cluster.intra_node_gbps=1e15",
                                         "cluster.inter_node_gbps=1e15", "cluster.memory_gib=1e6",
                                         "parallel.overlap_grad_sync=false"};
  std::vector<std::string> shared = free;
  shared.push_back("cluster.cores_per_node=2");
  const Config own = Cluster(free), two_cores = Cluster(shared);
  const ModelSpec spec = BuildModelSpec(own.model);
  double per_sample = 0;
  for (const LayerCost& x : FrozenAwareCosts(spec, EstimateForwardFlops(own.model, spec, 128))) {
    per_sample += x.forward + x.backward;
  }
  const double rate = own.cluster.tflops * 1e12 * own.cluster.efficiency;
  const Layout dp4{1, 1, 1, 4, 1, false, false, true}, pp4{1, 4, 1, 1, 1, false, false, true},
      pp4_one{1, 4, 1, 1, 16, false, false, true};
  CHECK(PredictLayout(two_cores, dp4).step_seconds == Approx(PredictLayout(own, dp4).step_seconds).epsilon(1e-12));
  const LayoutCost many = PredictLayout(two_cores, pp4), many_own = PredictLayout(own, pp4);
  REQUIRE((many.rejected.empty() && many_own.rejected.empty()));
  CHECK(many_own.bubble > 0.05);
  CHECK(many.step_seconds == Approx(16 * per_sample / 4 / rate).epsilon(1e-9));
  const LayoutCost one = PredictLayout(two_cores, pp4_one), one_own = PredictLayout(own, pp4_one);
  REQUIRE((one.rejected.empty() && one_own.rejected.empty()));
  CHECK(one_own.step_seconds == Approx(16 * per_sample / rate).epsilon(1e-9));
  CHECK(one.step_seconds == Approx(one_own.step_seconds / 2).epsilon(1e-9));
  // 4 ranks on a node of 8 slots and 4 cores share nothing.
  shared.push_back("cluster.gpus_per_node=8");
  shared.push_back("cluster.cores_per_node=4");
  CHECK(PredictLayout(Cluster(shared), pp4).step_seconds == Approx(many_own.step_seconds).epsilon(1e-12));
}

TEST_CASE("layout cost: the encoders are costed on the instances the data holds", "[layout]") {
  // A free network, dp = 4 and one stage, as above: the step is the microbatches' layer times, here with each
  // sample holding several images (three of the config's size; or 2.5 at their own size, of 12 patches and 150
  // attention pairs on average). The FLOPs are composed here from EstimateForwardFlops, each tower layer run per
  // image; the MFU stays the sustained rate's share of the peak only if the model FLOPs count the images too.
  const std::vector<std::string> free = {"cluster.latency_us=0", "cluster.intra_node_gbps=1e15",
                                         "cluster.inter_node_gbps=1e15", "cluster.memory_gib=1e6",
                                         "parallel.overlap_grad_sync=false"};
  const Layout dp4{1, 1, 1, 4, 2, false, false, true};
  std::vector<std::string> packed = free;
  packed.push_back("model.encoders.vision.dynamic_resolution=true");
  for (const auto& [overrides, load] : {std::pair{free, InstanceLoad{-1, -1, 3}},
                                        std::pair{packed, InstanceLoad{12, 150, 2.5}}}) {
    const Config base = Cluster(overrides);
    const ModelSpec spec = BuildModelSpec(base.model);
    const std::vector<InstanceLoad> loads = {load};
    double per_microbatch = 0;
    const std::vector<LayerCost> costs =
        FrozenAwareCosts(spec, EstimateForwardFlops(base.model, spec, 128, -1, -1, loads));
    for (size_t l = 0; l < costs.size(); ++l) {
      const double runs = spec.layers[l].chain == spec.llm_chain() ? 1 : load.per_sample;
      per_microbatch += 2 * runs * costs[l].total();  // two sequences per microbatch
    }
    const double rate = base.cluster.tflops * 1e12 * base.cluster.efficiency;
    const LayoutCost with = PredictLayout(base, dp4, loads), nominal = PredictLayout(base, dp4);
    INFO(load.per_sample << " images per sample: " << with.rejected);
    REQUIRE(with.rejected.empty());
    CHECK(with.step_seconds == Approx(2 * per_microbatch / rate).epsilon(1e-9));
    CHECK(with.step_seconds > nominal.step_seconds);
    CHECK(with.mfu == Approx(base.cluster.efficiency).epsilon(1e-9));
    // The projector trains: it holds its activations per image, so the images decide what fits.
    CHECK(with.memory_bytes > nominal.memory_bytes);
    std::ostringstream between;  // GiB between the two, exactly enough
    between.precision(17);
    between << "cluster.memory_gib=" << (with.memory_bytes + nominal.memory_bytes) / 2 / (1 << 30);
    std::vector<std::string> tight = overrides;
    tight.push_back(between.str());  // the later setting wins
    CHECK(PredictLayout(Cluster(tight), dp4).rejected.empty());
    CHECK(PredictLayout(Cluster(tight), dp4, loads).rejected.find("out of memory") == 0);
  }
}

TEST_CASE("the run's plan splits the LLM's layers over cp; every cp rank runs the towers whole", "[planner]") {
  // A cp rank holds 1/cp of each sequence's tokens but encodes every image of its samples: placed on the costs
  // it runs, the stages' forward adds up to the towers' whole and the LLM's over cp.
  for (const int cp : {1, 2, 4}) {
    const Config c = ParseConfig("", "test.yaml",
                                 {"model.encoders.vision.type=vision", "model.encoders.vision.num_layers=24",
                                  "model.encoders.vision.frozen=true", "model.llm.num_layers=8", "data.seq_len=128",
                                  "parallel.pp=2", "parallel.cp=" + std::to_string(cp), "parallel.cp_block=32"});
    const ModelSpec spec = BuildModelSpec(c.model);
    const std::vector<LayerCost> costs = Costs(c, spec);
    double want = 0;
    for (size_t l = 0; l < costs.size(); ++l) {
      want += costs[l].forward / (spec.layers[l].chain == spec.llm_chain() ? cp : 1);
    }
    double got = 0;
    for (const StagePlan& s : PlanFromConfig(c, spec, costs).stages) got += s.forward;
    INFO("cp " << cp);
    CHECK(got == Approx(want).epsilon(1e-12));
  }
}

TEST_CASE("profiled costs: each layer's measured rate times the work the data gives it", "[planner]") {
  // The profile ran one config-sized instance per sample of each encoder; here the data holds three images per
  // sample and one audio clip: the tower's layers take three times their profiled time, the rest theirs.
  const Config c = Llava(true);
  const ModelSpec spec = BuildModelSpec(c.model);
  std::vector<double> seconds(spec.layers.size());
  for (size_t l = 0; l < seconds.size(); ++l) seconds[l] = 1e-3 * static_cast<double>(l + 1);
  const std::vector<InstanceLoad> loads = {InstanceLoad{-1, -1, 3}};
  std::vector<double> expected = seconds;
  for (size_t l = 0; l < seconds.size(); ++l) {
    if (spec.chains[spec.layers[l].chain].name == "vision") expected[l] *= 3;
  }
  const std::vector<LayerCost> got = ProfiledCosts(c, spec, seconds, loads),
                               want = FrozenAwareCosts(spec, expected);
  REQUIRE(got.size() == want.size());
  for (size_t l = 0; l < got.size(); ++l) {
    INFO("layer " << l << " (" << spec.chains[spec.layers[l].chain].name << ")");
    CHECK(got[l].forward == Approx(want[l].forward).epsilon(1e-12));
    CHECK(got[l].backward == Approx(want[l].backward).epsilon(1e-12));
  }
  // Images at their own size: a profile that runs at one rate for every layer gives the FLOP estimate of what the
  // data holds at that rate.
  const Config packed = ParseConfig("", "test.yaml", {"model.encoders.vision.type=vision",
                                                      "model.encoders.vision.dynamic_resolution=true",
                                                      "model.encoders.vision.num_layers=4", "data.seq_len=128"});
  const ModelSpec packed_spec = BuildModelSpec(packed.model);
  const std::vector<InstanceLoad> sizes = {InstanceLoad{12, 150, 2.5}};
  std::vector<double> at_rate;
  for (const LayerCost& x : MicrobatchCosts(packed, packed_spec)) at_rate.push_back(x.forward / 1e9);
  const std::vector<LayerCost> scaled = ProfiledCosts(packed, packed_spec, at_rate, sizes),
                               estimated = MicrobatchCosts(packed, packed_spec, sizes);
  for (size_t l = 0; l < scaled.size(); ++l) {
    INFO("packed layer " << l);
    CHECK(scaled[l].forward == Approx(estimated[l].forward / 1e9).epsilon(1e-12));
    CHECK(scaled[l].backward == Approx(estimated[l].backward / 1e9).epsilon(1e-12));
  }
}

TEST_CASE("layout search: the emitted YAML selects the layout", "[layout]") {
  const Config base = Cluster({});
  const Layout l{2, 2, 1, 2, 4, true, true, false, 2};
  const Config parsed = ParseConfig(LayoutYaml(base, l), "emit.yaml", {"model.encoders.vision.type=vision"});
  CHECK(parsed.parallel.schedule == ScheduleKind::kInterleaved);
  CHECK(parsed.parallel.virtual_stages == 2);
  CHECK(ParseConfig(LayoutYaml(base, Layout{1, 2, 1, 4}), "emit.yaml", {}).parallel.schedule == ScheduleKind::k1F1B);
  CHECK(parsed.parallel.tp == 2);
  CHECK(parsed.parallel.pp == 2);
  CHECK(parsed.parallel.cp == 1);
  CHECK(parsed.parallel.dp == 2);
  CHECK(parsed.parallel.sequence_parallel);
  CHECK(parsed.train.micro_batch_size == 4);
  CHECK(parsed.model.activation_checkpointing);
  REQUIRE(parsed.model.encoders.size() == 1);
  CHECK_FALSE(parsed.model.encoders[0].tp);
}

TEST_CASE("interleaved plans: v LLM stages per rank, round-robin, every layer once, rank memory",
          "[planner][interleaved]") {
  const Config c = Llava(false);
  const ModelSpec spec = BuildModelSpec(c.model);
  const std::vector<LayerCost> costs = Costs(c, spec);
  const int llm_begin = spec.chains[spec.llm_chain()].begin;
  for (PlanMode mode : {PlanMode::kFrozenAware, PlanMode::kUniform, PlanMode::kColocated}) {
    for (int m : {4, 8}) {
      INFO(NameOf(mode) << " microbatches " << m);
      const PipelinePlan plan = PlanPipeline(spec, costs, 3, m, mode, 0.0, 2);
      CHECK(plan.virtual_stages == 2);
      CHECK(plan.graph.num_ranks() == 3);
      CHECK(plan.llm_stages % 2 == 0);
      // Every layer on exactly one rank, each rank's stages alternating with the other LLM ranks'.
      std::vector<int> all;
      for (int r = 0; r < 3; ++r) {
        const std::vector<int> layers = LayersOfRank(plan, r);
        all.insert(all.end(), layers.begin(), layers.end());
      }
      std::sort(all.begin(), all.end());
      std::vector<int> every(spec.layers.size());
      std::iota(every.begin(), every.end(), 0);
      CHECK(all == every);
      const int p = plan.llm_stages / 2;
      for (int s = plan.graph.first_llm; s < plan.graph.num_stages(); ++s) {
        CHECK(plan.graph.rank[s] == plan.graph.first_llm + (s - plan.graph.first_llm) % p);
        const bool shared = s == plan.graph.first_llm && plan.encoder_stages.empty();  // the encoders' stage too
        CHECK(plan.stages[s].layers.front() >= (shared ? 0 : llm_begin));
      }
      // The rank memory counts both of a rank's stages' activations at the schedule's fullest moment.
      std::vector<LayerMemory> memory(spec.layers.size());
      for (size_t l = 0; l < memory.size(); ++l) memory[l] = {0.0, 1.0};
      const std::vector<double> bytes = RankMemoryBytes(plan, spec, memory);
      for (int r = 0; r < 3; ++r) {
        double live = 0, peak = 0;
        for (const Action& a : plan.schedule[r]) {
          if (!plan.graph.has_backward[a.stage]) continue;
          const double n = static_cast<double>(plan.stages[a.stage].layers.size());
          if (a.type == ActionType::kForward) peak = std::max(peak, live += n);
          if (a.type == ActionType::kBackward) live -= n;
        }
        CHECK(bytes[r] == Approx(peak));
      }
    }
  }
  // 7 microbatches over 3 LLM ranks: rounds of 2 x 3 leave one over.
  CHECK_THROWS_WITH(PlanPipeline(spec, costs, 3, 7, PlanMode::kColocated, 0.0, 2),
                    Catch::Contains("whose microbatches fit interleaving's rounds"));
}

TEST_CASE("frozen_unaware places as the frozen-aware search would on B = 2F costs, and is timed on the true costs",
          "[planner]") {
  for (bool audio : {false, true}) {
    const Config c = Llava(audio);
    const ModelSpec spec = BuildModelSpec(c.model);
    const std::vector<LayerCost> costs = Costs(c, spec);
    std::vector<double> forward;
    for (const LayerCost& x : costs) forward.push_back(x.forward);
    for (int stages : {2, 3, 4}) {
      INFO("audio " << audio << " stages " << stages);
      const PipelinePlan blind = PlanPipeline(spec, FrozenUnawareCosts(forward), stages, 8, PlanMode::kFrozenAware);
      const PipelinePlan plan = PlanPipeline(spec, costs, stages, 8, PlanMode::kFrozenUnaware);
      CHECK(plan.mode == PlanMode::kFrozenUnaware);
      REQUIRE(plan.stages.size() == blind.stages.size());
      std::vector<double> f, b;
      for (size_t s = 0; s < plan.stages.size(); ++s) {
        CHECK(plan.stages[s].layers == blind.stages[s].layers);
        double fs = 0, bs = 0;
        for (int l : plan.stages[s].layers) fs += costs[l].forward, bs += costs[l].backward;
        CHECK(plan.stages[s].forward == Approx(fs));
        CHECK(plan.stages[s].backward == Approx(bs));
        CHECK(plan.graph.has_backward[s] == (bs > 0));  // a frozen stage with nothing trainable before it: none
        f.push_back(fs), b.push_back(bs);
      }
      CHECK(plan.timeline.makespan == Approx(Simulate(plan.graph, plan.schedule, f, b, 0.0).makespan));
      // Blind to the frozen tower's missing weight gradients, it loses to the frozen-aware plan here.
      CHECK(PlanPipeline(spec, costs, stages, 8, PlanMode::kFrozenAware).timeline.makespan <=
            plan.timeline.makespan);
    }
  }
}
