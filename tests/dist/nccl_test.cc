#include <ATen/ATen.h>

#include <catch2/catch.hpp>

#include "cornstarch/dist/nccl_communicator.h"

using namespace cornstarch;

TEST_CASE("the linked NCCL is recent enough for ncclCommSplit and ncclAvg", "[nccl]") {
  CHECK(NcclVersion() >= 21800);
}

TEST_CASE("tensor dtypes map to NCCL types, and unsupported ones are refused", "[nccl]") {
  CHECK(NcclDataType(at::kFloat) != NcclDataType(at::kHalf));
  CHECK(NcclDataType(at::kBFloat16) != NcclDataType(at::kHalf));
  CHECK(NcclDataType(at::kByte) == NcclDataType(at::kBool));
  CHECK_THROWS_WITH(NcclDataType(at::kComplexFloat), Catch::Contains("NCCL cannot move"));
}
