// Host-side logic of the CUDA bitfield attention: parameter validation and launch geometry. Links the nvcc-built
// object, so a broken CUDA build fails here; runs without a GPU.
#include <catch2/catch.hpp>

#include "kernels/bitfield_attention_cuda.h"
#include "kernels/bitfield_attention_launch.h"

using namespace cornstarch::cuda;

namespace {

BitfieldAttentionParams Shape(int64_t b, int64_t h, int64_t hkv, int64_t s, int64_t d) {
  BitfieldAttentionParams p;
  p.batch = b;
  p.heads = h;
  p.kv_heads = hkv;
  p.seq = s;
  p.dim = d;
  return p;
}

}  // namespace

TEST_CASE("launch geometry: one thread per row, blocks over rows x heads x batch", "[cuda]") {
  const BitfieldAttentionParams p = Shape(2, 8, 2, 1025, 128);
  const LaunchConfig f = ForwardConfig(p);
  CHECK(f.grid.x == 17);  // ceil(1025 / 64)
  CHECK(f.grid.y == 8);
  CHECK(f.grid.z == 2);
  CHECK(f.block.x == kBlockRows);
  CHECK(f.shared_bytes == 2 * kTileCols * 128 * 4 + kTileCols * (8 + 8));
  const LaunchConfig kv = DkvConfig(p);
  CHECK(kv.grid.y == 2);  // one block row per kv head; the 4 query heads of its group are looped inside
  CHECK(kv.grid.x == 17);
  CHECK(DqConfig(Shape(1, 1, 1, 1, 64)).grid.x == 1);
}

TEST_CASE("invalid parameters are named before anything is launched", "[cuda]") {
  CHECK(ValidateParams(Shape(1, 4, 2, 128, 64)).empty());
  CHECK(ValidateParams(Shape(1, 4, 3, 128, 64)) == "heads must be a multiple of kv_heads");
  CHECK(ValidateParams(Shape(1, 4, 2, 128, 512)) == "head_dim above 256");
  CHECK(ValidateParams(Shape(0, 4, 2, 128, 64)) == "empty or negative shape");
  CHECK(ValidateParams(Shape(70000, 4, 2, 128, 64)) == "batch and heads must fit a grid dimension (65535)");
  // The launchers refuse them too, without touching a device (there is none here).
  CHECK(LaunchBitfieldAttentionForward(Shape(1, 4, 3, 128, 64), nullptr) == cudaErrorInvalidValue);
  CHECK(LaunchBitfieldAttentionBackward(Shape(1, 4, 2, 128, 512), nullptr) == cudaErrorInvalidValue);
}
