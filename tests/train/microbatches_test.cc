// The trainer's data slicing alone: every step's global batch is covered exactly once by the dp ranks'
// microbatches, in order, whatever step a loader starts at.
#include "cornstarch/train/microbatches.h"  // LibTorch before catch.hpp: glog's CHECK would replace Catch2's

#include <catch2/catch.hpp>
#include <tuple>
#include <vector>

using namespace cornstarch;

TEST_CASE("the dp ranks' microbatches tile each step's global batch exactly once", "[train][data]") {
  for (const auto& [global, micro, dp] : std::vector<std::tuple<int64_t, int64_t, int>>{{16, 8, 1}, {16, 4, 2},
                                                                                          {24, 2, 4}, {8, 8, 1}}) {
    INFO("global " << global << " micro " << micro << " dp " << dp);
    TrainConfig t;
    t.global_batch_size = global;
    t.micro_batch_size = micro;
    for (const int64_t first_step : {0, 3}) {
      std::vector<int> seen(static_cast<size_t>(3 * global), 0);  // three steps from first_step
      for (int rank = 0; rank < dp; ++rank) {
        const MicrobatchSlicer slicer(t, rank, dp);
        CHECK(slicer.local_batch() == global / dp);
        CHECK(slicer.per_step() == global / dp / micro);
        int64_t previous = -1;
        for (int64_t i = 0; i < 3 * slicer.per_step(); ++i) {
          const BatchLoader::Slice s = slicer.Request(first_step, i);
          CHECK(s.count == micro);
          CHECK(s.first > previous);  // a rank reads its requests in increasing order
          previous = s.first;
          // Request i belongs to step first_step + i / per_step, inside this rank's contiguous share of it.
          const int64_t step = first_step + i / slicer.per_step();
          CHECK(s.first >= step * global + rank * (global / dp));
          CHECK(s.first + s.count <= step * global + (rank + 1) * (global / dp));
          for (int64_t k = s.first; k < s.first + s.count; ++k) ++seen.at(static_cast<size_t>(k - first_step * global));
        }
      }
      for (size_t k = 0; k < seen.size(); ++k) CHECK(seen[k] == 1);
    }
  }
}
