#include <catch2/catch.hpp>
#include <map>
#include <set>

#include "cornstarch/dist/launch_env.h"
#include "cornstarch/plan/parallel_dims.h"
#include "cornstarch/base/check.h"
#include "tests/error_of.h"

using namespace cornstarch;
using cornstarch::testing::ErrorOf;

TEST_CASE("rank <-> coordinate mapping is a bijection with tp and cp innermost", "[dims]") {
  for (int pp : {1, 2, 3, 4}) {
    for (int dp : {1, 2, 3}) {
      for (int cp : {1, 2, 4}) {
        for (int tp : {1, 2, 4}) {
          const ParallelDims dims(pp, dp, cp, tp, pp * dp * cp * tp);
          std::set<int> seen;
          for (int r = 0; r < dims.world_size(); ++r) {
            const ParallelDims::Coord c = dims.CoordOf(r);
            CHECK(dims.RankOf(c) == r);
            CHECK(r == ((c.pp * dp + c.dp) * cp + c.cp) * tp + c.tp);
            seen.insert(r);
          }
          CHECK(static_cast<int>(seen.size()) == pp * dp * cp * tp);
        }
      }
    }
  }
}

TEST_CASE("axis groups partition the world and differ only along their axis", "[dims]") {
  const ParallelDims dims(3, 2, 2, 2, 24);
  for (Axis axis : {Axis::kPP, Axis::kDP, Axis::kCP, Axis::kTP}) {
    std::map<int, std::vector<int>> by_color;
    for (int r = 0; r < 24; ++r) {
      const std::vector<int> group = dims.GroupRanks(r, axis);
      REQUIRE(static_cast<int>(group.size()) == dims.degree(axis));
      // The position of a rank in its group is its coordinate on the axis.
      CHECK(group[dims.CoordOf(r)[axis]] == r);
      for (int member : group) {
        CHECK(dims.GroupColor(member, axis) == dims.GroupColor(r, axis));
        for (Axis other : {Axis::kPP, Axis::kDP, Axis::kCP, Axis::kTP}) {
          if (other != axis) CHECK(dims.CoordOf(member)[other] == dims.CoordOf(r)[other]);
        }
      }
      by_color[dims.GroupColor(r, axis)].push_back(r);
    }
    CHECK(static_cast<int>(by_color.size()) == 24 / dims.degree(axis));
  }
  CHECK(dims.Describe() == "pp=3 x dp=2 x cp=2 x tp=2 = 24 ranks");
  // Rank 11 = (pp 1, dp 0, cp 1, tp 1): tp neighbours are adjacent ranks, then cp, dp, pp.
  CHECK(dims.GroupRanks(11, Axis::kTP) == std::vector<int>{10, 11});
  CHECK(dims.GroupRanks(11, Axis::kCP) == std::vector<int>{9, 11});
  CHECK(dims.GroupRanks(11, Axis::kDP) == std::vector<int>{11, 15});
  CHECK(dims.GroupRanks(11, Axis::kPP) == std::vector<int>{3, 11, 19});
}

TEST_CASE("invalid layouts name each factor and the world size", "[dims]") {
  CHECK(ErrorOf([] { ParallelDims(2, 2, 1, 1, 3, "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE"); }) ==
        "parallel: pp=2 x dp=2 x cp=1 x tp=1 needs 4 ranks, but the job has 3 (from "
        "OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE)");
  CHECK(ErrorOf([] { ParallelDims(1, 1, 1, 1, 2); }) ==
        "parallel: pp=1 x dp=1 x cp=1 x tp=1 needs 1 ranks, but the job has 2");
  CHECK(ErrorOf([] { ParallelDims(0, 1, 1, 1, 1); }) == "parallel.pp: must be at least 1, got 0");
  CHECK(ErrorOf([] { ParallelDims(1, 1, -1, 1, 1); }) == "parallel.cp: must be at least 1, got -1");
  CHECK(ErrorOf([] { ParallelDims(1, 1, 1, 0, 1); }) == "parallel.tp: must be at least 1, got 0");
}

TEST_CASE("launch environment: OpenMPI, then Slurm, then RANK/WORLD_SIZE, else one process", "[launch]") {
  using Env = std::map<std::string, std::string>;
  auto detect = [](const Env& env) {
    return DetectLaunchEnv([&](const char* name) -> const char* {
      const auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  const LaunchEnv single = detect({});
  CHECK(single.world_size == 1);
  CHECK(single.rank == 0);
  const LaunchEnv ompi = detect({{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                 {"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                 {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}});
  CHECK(ompi.local_world_size == 2);
  CHECK(ompi.rank == 3);
  CHECK(ompi.local_rank == 1);
  CHECK(ompi.world_size == 4);
  const LaunchEnv slurm = detect({{"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "8"},
                                  {"RANK", "0"}, {"WORLD_SIZE", "2"}});
  CHECK(slurm.rank == 5);
  CHECK(slurm.world_size == 8);
  CHECK(slurm.source == "SLURM_PROCID/SLURM_NTASKS");
  const LaunchEnv torchrun = detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  CHECK(torchrun.rank == 1);
  CHECK(torchrun.local_rank == 0);
  CHECK(torchrun.local_world_size == 1);
  CHECK(ErrorOf([&] { detect({{"RANK", "2"}, {"WORLD_SIZE", "2"}}); }) == "RANK: must be below WORLD_SIZE=2, got 2");
  CHECK(ErrorOf([&] { detect({{"RANK", "0"}}); }) ==
        "WORLD_SIZE: not set, but the launcher set the other rank variables");
  CHECK(ErrorOf([&] { detect({{"SLURM_PROCID", "x"}, {"SLURM_NTASKS", "2"}}); }) ==
        "SLURM_PROCID: expected a non-negative integer, got 'x'");
}
