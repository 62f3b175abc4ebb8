#include "cornstarch/plan/parallel_dims.h"

#include "cornstarch/base/check.h"

namespace cornstarch {

const char* AxisName(Axis axis) {
  switch (axis) {
    case Axis::kPP: return "pp";
    case Axis::kDP: return "dp";
    case Axis::kCP: return "cp";
    case Axis::kTP: return "tp";
  }
  return "?";
}

int ParallelDims::Coord::operator[](Axis a) const {
  switch (a) {
    case Axis::kPP: return pp;
    case Axis::kDP: return dp;
    case Axis::kCP: return cp;
    case Axis::kTP: return tp;
  }
  return 0;
}

ParallelDims::ParallelDims(int pp, int dp, int cp, int tp, int world_size, const std::string& world_source)
    : pp_(pp), dp_(dp), cp_(cp), tp_(tp) {
  for (Axis a : {Axis::kPP, Axis::kDP, Axis::kCP, Axis::kTP}) {
    if (degree(a) < 1) {
      throw Error(std::string("parallel.") + AxisName(a) + ": must be at least 1, got " + std::to_string(degree(a)));
    }
  }
  const int needed = pp_ * dp_ * cp_ * tp_;
  if (needed != world_size) {
    throw Error("parallel: pp=" + std::to_string(pp_) + " x dp=" + std::to_string(dp_) + " x cp=" +
                std::to_string(cp_) + " x tp=" + std::to_string(tp_) + " needs " + std::to_string(needed) +
                " ranks, but the job has " + std::to_string(world_size) +
                (world_source.empty() ? "" : " (from " + world_source + ")"));
  }
}

int ParallelDims::degree(Axis axis) const {
  switch (axis) {
    case Axis::kPP: return pp_;
    case Axis::kDP: return dp_;
    case Axis::kCP: return cp_;
    case Axis::kTP: return tp_;
  }
  return 0;
}

ParallelDims::Coord ParallelDims::CoordOf(int rank) const {
  CS_CHECK(rank >= 0 && rank < world_size(), "rank ", rank, " outside world of ", world_size());
  Coord c;
  c.tp = rank % tp_;
  rank /= tp_;
  c.cp = rank % cp_;
  rank /= cp_;
  c.dp = rank % dp_;
  c.pp = rank / dp_;
  return c;
}

int ParallelDims::RankOf(const Coord& c) const {
  CS_CHECK(c.pp >= 0 && c.pp < pp_ && c.dp >= 0 && c.dp < dp_ && c.cp >= 0 && c.cp < cp_ && c.tp >= 0 && c.tp < tp_,
           "coordinate outside the mesh");
  return ((c.pp * dp_ + c.dp) * cp_ + c.cp) * tp_ + c.tp;
}

std::vector<int> ParallelDims::GroupRanks(int rank, Axis axis) const {
  Coord c = CoordOf(rank);
  std::vector<int> ranks;
  for (int i = 0; i < degree(axis); ++i) {
    switch (axis) {
      case Axis::kPP: c.pp = i; break;
      case Axis::kDP: c.dp = i; break;
      case Axis::kCP: c.cp = i; break;
      case Axis::kTP: c.tp = i; break;
    }
    ranks.push_back(RankOf(c));
  }
  return ranks;
}

int ParallelDims::GroupColor(int rank, Axis axis) const { return GroupRanks(rank, axis).front(); }

std::string ParallelDims::Describe() const {
  return "pp=" + std::to_string(pp_) + " x dp=" + std::to_string(dp_) + " x cp=" + std::to_string(cp_) +
         " x tp=" + std::to_string(tp_) + " = " + std::to_string(world_size()) + " ranks";
}

}  // namespace cornstarch
