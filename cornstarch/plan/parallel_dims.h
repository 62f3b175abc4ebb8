// The rank mesh: pp x dp x cp x tp ranks, with rank = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i, so the axes
// that talk most (tp, then cp) are the closest ranks (same node first). Which layers a pipeline stage runs is
// the pipeline plan's business (plan/planner.h), not the mesh's. Pure: validated on construction, no
// communication; Communicator::Split turns GroupColor into groups.
#pragma once

#include <string>
#include <vector>

namespace cornstarch {

enum class Axis { kPP, kDP, kCP, kTP };
const char* AxisName(Axis axis);

class ParallelDims {
 public:
  struct Coord {
    int pp = 0, dp = 0, cp = 0, tp = 0;
    int operator[](Axis a) const;
  };

  // Throws Error naming each factor when pp * dp * cp * tp != world_size (`world_source` says where the world
  // size came from), or when a degree is below 1.
  ParallelDims(int pp, int dp, int cp, int tp, int world_size, const std::string& world_source = "");

  int world_size() const { return pp_ * dp_ * cp_ * tp_; }
  int degree(Axis axis) const;

  Coord CoordOf(int rank) const;
  int RankOf(const Coord& c) const;

  // The ranks that share every coordinate with `rank` except `axis`, ordered along `axis` (so the position of a
  // rank in the list is its coordinate on that axis).
  std::vector<int> GroupRanks(int rank, Axis axis) const;
  // Equal for exactly the ranks of one such group: the color to pass to Communicator::Split.
  int GroupColor(int rank, Axis axis) const;

  // "pp=3 x dp=2 x cp=1 x tp=1 = 6 ranks"
  std::string Describe() const;

 private:
  int pp_, dp_, cp_, tp_;
};

}  // namespace cornstarch
