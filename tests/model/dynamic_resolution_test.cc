// Images at their own resolution: the grid rule, the packing of a microbatch's images, and the packed vision tower
// against the fixed-size tower (a square image_size image gives the same features and gradients) and against each
// image run alone (packing isolates images exactly, padding rows included).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "cornstarch/data/batch.h"
#include "cornstarch/device/torch_runtime.h"
#include "cornstarch/model/multimodal_model.h"
#include "cornstarch/model/transformer.h"
#include "cornstarch/plan/bitfield_mask.h"
#include "cornstarch/plan/config.h"
#include "cornstarch/plan/image_grid.h"

using namespace cornstarch;

namespace cornstarch {
std::ostream& operator<<(std::ostream& out, const PatchGrid& g) { return out << g.rows << " x " << g.cols; }
}  // namespace cornstarch

namespace {

Config MakeConfig(const std::vector<std::string>& overrides) {
  std::vector<std::string> all = {"model.encoders.vision.type=vision", "model.encoders.vision.image_size=32",
                                  "model.encoders.vision.patch_size=8", "model.encoders.vision.num_layers=2"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return ParseConfig("train: {steps: 10}\noptimizer: {warmup_steps: 2}\n", "test.yaml", all);
}

const std::vector<std::string> kDynamic = {"model.encoders.vision.dynamic_resolution=true",
                                           "model.encoders.vision.max_patches=24"};

// [3, rows * 8, cols * 8] pixels -> [rows * cols, 3 * 8 * 8] patches, written out index by index (not by the
// reshape the data layer uses).
torch::Tensor Patchify(const torch::Tensor& image, const PatchGrid& g) {
  constexpr int64_t p = 8;
  torch::Tensor out = torch::empty({g.patches(), 3 * p * p});
  auto img = image.accessor<float, 3>();
  auto o = out.accessor<float, 2>();
  for (int64_t r = 0; r < g.rows; ++r) {
    for (int64_t c = 0; c < g.cols; ++c) {
      for (int64_t ch = 0; ch < 3; ++ch) {
        for (int64_t y = 0; y < p; ++y) {
          for (int64_t x = 0; x < p; ++x) o[r * g.cols + c][(ch * p + y) * p + x] = img[ch][r * p + y][c * p + x];
        }
      }
    }
  }
  return out;
}

// A batch holding only the vision input `m` (the LLM side is never run here).
Batch VisionBatch(ModalityInput m) {
  Batch b;
  b.input_ids = torch::zeros({1, 4}, torch::kLong);
  b.positions = torch::zeros({1, 4}, torch::kLong);
  b.modalities.push_back(std::move(m));
  return b;
}

// The vision chain's projected features for `batch`, one row per token.
torch::Tensor Features(MultimodalModel& model, const Batch& batch) {
  ForwardContext ctx = model.MakeContext(batch);
  const ChainSpec& chain = model.spec().chains[0];
  const torch::Tensor x = model.RunLayers(0, chain.begin, chain.end, batch.modalities[0].inputs, batch, ctx);
  return x.reshape({-1, x.size(-1)});
}

// The images' features from one packed run, image by image.
std::vector<torch::Tensor> PackedFeatures(MultimodalModel& model, const std::vector<torch::Tensor>& images,
                                          const std::vector<PatchGrid>& grids) {
  std::vector<torch::Tensor> patches;
  for (size_t i = 0; i < images.size(); ++i) patches.push_back(Patchify(images[i], grids[i]));
  const Batch batch = VisionBatch(PackPatches(torch::cat(patches), grids));
  const torch::Tensor all = Features(model, batch).index_select(0, batch.modalities[0].patches);
  std::vector<torch::Tensor> out;
  int64_t at = 0;
  for (const PatchGrid& g : grids) {
    out.push_back(all.narrow(0, at, g.patches()));
    at += g.patches();
  }
  return out;
}

}  // namespace

TEST_CASE("dynamic grids: rounded to the patch grid, within max_patches, as large as the aspect ratio allows",
          "[dynamic]") {
  EncoderConfig e;
  e.image_size = 32, e.patch_size = 8, e.dynamic_resolution = true;
  CHECK(MaxPatches(e) == 16);
  CHECK(DynamicGrid(32, 32, e) == PatchGrid{4, 4});
  CHECK(DynamicGrid(29, 11, e) == PatchGrid{1, 4});  // 11 px -> 1 row, 29 px -> 4 columns
  CHECK(DynamicGrid(3, 2, e) == PatchGrid{1, 1});    // at least one patch
  e.max_patches = 24;
  CHECK(DynamicGrid(40, 24, e) == PatchGrid{3, 5});  // fits: each side rounded only
  // 96 x 48 rounds to 6 x 12 = 72 > 24: scaled by sqrt(24 / 72) each way, floored: 3 x 6 = 18.
  CHECK(DynamicGrid(96, 48, e) == PatchGrid{3, 6});
  CHECK(DynamicGrid(4000, 3, e) == PatchGrid{1, 24});  // thinner than a patch: the long side shortened to fit
  std::mt19937_64 rng(3);
  for (int i = 0; i < 2000; ++i) {
    const int64_t w = 1 + static_cast<int64_t>(rng() % 400), h = 1 + static_cast<int64_t>(rng() % 400);
    const PatchGrid g = DynamicGrid(w, h, e);
    INFO(w << " x " << h << " -> " << g.rows << " x " << g.cols);
    REQUIRE(g.rows >= 1);
    REQUIRE(g.cols >= 1);
    REQUIRE(g.patches() <= 24);
    const int64_t rows = std::max<int64_t>(1, std::llround(h / 8.0));
    const int64_t cols = std::max<int64_t>(1, std::llround(w / 8.0));
    if (rows * cols <= 24) {
      CHECK(g == PatchGrid{rows, cols});
    } else if (g.rows > 1 && g.cols > 1) {
      CHECK((g.rows + 1) * (g.cols + 1) > 24);  // no larger grid of the same shape fits
      // The aspect ratio is kept to within one patch on each side.
      CHECK(std::abs(g.cols - g.rows * static_cast<double>(w) / h) <= 1 + static_cast<double>(w) / h);
    }
  }
}

TEST_CASE("anyres picks the tile grid keeping most pixels, then wasting least, as LLaVA-NeXT does", "[dynamic]") {
  EncoderConfig e;
  e.image_size = 336, e.patch_size = 14, e.anyres_max_tiles = 4;
  CHECK(AnyresTiles(672, 336, e) == PatchGrid{1, 2});    // fits 1 x 2 exactly
  CHECK(AnyresTiles(1000, 1000, e) == PatchGrid{2, 2});  // only 2 x 2 keeps 672 x 672 of it
  CHECK(AnyresTiles(100, 100, e) == PatchGrid{1, 2});    // every grid keeps it whole: least waste, fewer rows
  CHECK(AnyresTiles(300, 900, e) == PatchGrid{3, 1});    // tall: 3 x 1 keeps it whole, 4 x 1 wastes more
  e.anyres_max_tiles = 1;
  CHECK(AnyresTiles(1000, 500, e) == PatchGrid{1, 1});   // the only grid allowed
  e.anyres_max_tiles = 4;
  // The views: the base view, then the tiles, each a 24 x 24 grid of patches.
  const std::vector<PatchGrid> views = ImageViews(1000, 1000, e);
  CHECK(views == std::vector<PatchGrid>(5, PatchGrid{24, 24}));
  CHECK(PackedTower(e));
  CHECK_FALSE(PackedTower(EncoderConfig{}));
}

TEST_CASE("a microbatch's images pack into rows of at most 61, one group bit each, padding 0", "[dynamic]") {
  const PackedImages one = PackImages({{4, 4}, {3, 5}, {1, 2}});
  CHECK(one.rows == 1);
  CHECK(one.length == 33);
  CHECK(one.start == std::vector<int64_t>{0, 16, 31});
  for (int64_t t = 0; t < 33; ++t) CHECK(one.words[t] == (int64_t{1} << (t < 16 ? 1 : t < 31 ? 2 : 3)));
  std::vector<PatchGrid> many(kMaxGroups + 2, PatchGrid{1, 1});
  many[kMaxGroups] = {2, 3};
  const PackedImages two = PackImages(many);
  CHECK(two.rows == 2);
  CHECK(two.length == kMaxGroups);
  CHECK(two.start[kMaxGroups - 1] == kMaxGroups - 1);
  CHECK(two.start[kMaxGroups] == kMaxGroups);  // row 2 starts with the 2 x 3 image
  CHECK(two.start[kMaxGroups + 1] == kMaxGroups + 6);
  CHECK(two.words[kMaxGroups - 1] == int64_t{1} << kMaxGroups);
  CHECK(two.words[kMaxGroups] == int64_t{1} << 1);
  CHECK(two.words[kMaxGroups + 6] == int64_t{1} << 2);
  CHECK(two.words[kMaxGroups + 7] == 0);  // padding
  CHECK(PackImages({}).rows == 0);
}

TEST_CASE("the packed tower gives an image_size image the fixed tower's features and gradients", "[dynamic][model]") {
  ConfigureTorchRuntime(1);
  torch::manual_seed(5);
  const Config fixed_cfg = MakeConfig({});
  const Config dynamic_cfg = MakeConfig(kDynamic);
  MultimodalModel fixed(fixed_cfg.model, 7), dynamic(dynamic_cfg.model, 7);
  const torch::Tensor square = torch::randn({3, 32, 32});
  const torch::Tensor probe = torch::randn({16, fixed_cfg.model.llm.hidden_size});

  const torch::Tensor want = Features(fixed, VisionBatch({square.unsqueeze(0), torch::Tensor()}));
  // Packed between two other images, the square one's rows are the same.
  const std::vector<torch::Tensor> got =
      PackedFeatures(dynamic, {torch::randn({3, 24, 40}), square, torch::randn({3, 8, 64})}, {{3, 5}, {4, 4}, {1, 8}});
  CHECK(torch::allclose(got[1], want, 1e-5, 1e-5));

  // Gradients of every tower parameter, with the square image alone.
  (want * probe).sum().backward();
  (PackedFeatures(dynamic, {square}, {{4, 4}})[0] * probe).sum().backward();
  std::map<std::string, torch::Tensor> fixed_grads;
  for (const auto& [name, p] : fixed.NamedParameters()) fixed_grads[name] = p.grad();
  int compared = 0;
  for (const auto& [name, p] : dynamic.NamedParameters()) {
    if (name.rfind("encoder.", 0) != 0) continue;
    INFO(name);
    REQUIRE(fixed_grads[name].defined());
    REQUIRE(p.grad().defined());
    CHECK(torch::allclose(p.grad(), fixed_grads[name], 1e-5, 1e-5));
    ++compared;
  }
  CHECK(compared > 10);
}

TEST_CASE("packed images never see each other: each equals its run alone, padded rows included", "[dynamic][model]") {
  ConfigureTorchRuntime(1);
  torch::manual_seed(6);
  for (const std::string positions : {"interpolate", "rope_2d"}) {
    INFO(positions);
    std::vector<std::string> overrides = kDynamic;
    overrides.push_back("model.encoders.vision.dynamic_positions=" + positions);
    MultimodalModel model(MakeConfig(overrides).model, 8);
    // 63 images: a row of 61, then a row of two and padding.
    std::vector<PatchGrid> grids(63, PatchGrid{1, 1});
    grids[0] = {3, 5}, grids[1] = {2, 2}, grids[61] = {4, 3}, grids[62] = {2, 1};
    std::vector<torch::Tensor> images;
    for (const PatchGrid& g : grids) images.push_back(torch::randn({3, g.rows * 8, g.cols * 8}));
    const std::vector<torch::Tensor> packed = PackedFeatures(model, images, grids);
    for (int i : {0, 1, 30, 61, 62}) {
      INFO("image " << i);
      CHECK(torch::allclose(packed[i], PackedFeatures(model, {images[i]}, {grids[i]})[0], 1e-5, 1e-5));
    }
    // Not trivially: an image's features do depend on where its patches are.
    const torch::Tensor flipped = images[0].flip(2);
    CHECK(!torch::allclose(PackedFeatures(model, {flipped}, {grids[0]})[0].sum(0),
                           PackedFeatures(model, {images[0]}, {grids[0]})[0].sum(0), 1e-3, 1e-3));
  }
}

TEST_CASE("2-D RoPE tables: the patch row over the first rotary frequencies, the column over the rest",
          "[dynamic][model]") {
  const int64_t head = 16, q = head / 4;
  const std::vector<PatchGrid> grids = {{2, 3}, {3, 1}};
  const PackedImages packed = PackImages(grids);
  std::vector<int64_t> patches;
  for (size_t i = 0; i < grids.size(); ++i) {
    for (int64_t k = 0; k < grids[i].patches(); ++k) patches.push_back(packed.start[i] + k);
  }
  const torch::Tensor grid = torch::tensor(std::vector<int64_t>{2, 3, 3, 1}, torch::kLong).view({2, 2});
  const auto [cos, sin] =
      Rope2dTables(grid, torch::tensor(patches, torch::kLong), packed.rows, packed.length, head, 10000.0);
  REQUIRE(cos.sizes() == torch::IntArrayRef({1, 9, head}));
  auto c = cos.accessor<float, 3>();
  auto s = sin.accessor<float, 3>();
  int64_t t = 0;
  for (const PatchGrid& g : grids) {
    for (int64_t r = 0; r < g.rows; ++r) {
      for (int64_t col = 0; col < g.cols; ++col, ++t) {
        for (int64_t i = 0; i < head; ++i) {
          const int64_t j = i % (head / 2);  // "rotate half": channel i and i + head / 2 share their angle
          const double inv = std::pow(10000.0, -static_cast<double>(j % q) / q);
          const double angle = (j < q ? r : col) * inv;
          INFO("token " << t << " channel " << i);
          CHECK(c[0][t][i] == Approx(std::cos(angle)).margin(1e-6));
          CHECK(s[0][t][i] == Approx(std::sin(angle)).margin(1e-6));
        }
      }
    }
  }
}
