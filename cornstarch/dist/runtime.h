// The distributed runtime of one process: where it sits (LaunchEnv), the validated mesh (ParallelDims), the world
// communicator and one communicator per mesh axis. Single-process runs get the single-process communicator and
// never touch MPI, so `cornstarch-train` works without a launcher.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "cornstarch/plan/config.h"
#include "cornstarch/dist/communicator.h"
#include "cornstarch/dist/launch_env.h"
#include "cornstarch/plan/parallel_dims.h"

namespace cornstarch {

class DistRuntime {
 public:
  // Validates `parallel` against the launcher's world size before MPI starts (so every rank reports the same
  // error and exits), then starts MPI when the world has more than one rank and splits the axis groups.
  DistRuntime(const ParallelConfig& parallel, const LaunchEnv& env, int* argc, char*** argv);
  ~DistRuntime();

  const LaunchEnv& env() const { return env_; }
  const ParallelDims& dims() const { return dims_; }
  int rank() const { return env_.rank; }
  ParallelDims::Coord coord() const { return dims_.CoordOf(env_.rank); }

  Communicator& world() { return *world_; }
  // The group of ranks that differ from this one only along `axis` (ordered by that axis).
  Communicator& group(Axis axis) { return *groups_.at(axis); }
  // Puts `wrap(group)` in the group's place: a communicator that observes or checks one axis's traffic and passes
  // it on (the pipeline test's recorder). Call it before anything holds a reference to the group.
  void WrapGroup(Axis axis,
                 const std::function<std::unique_ptr<Communicator>(std::unique_ptr<Communicator>)>& wrap) {
    groups_.at(axis) = wrap(std::move(groups_.at(axis)));
  }

 private:
  LaunchEnv env_;
  ParallelDims dims_;
  std::unique_ptr<Communicator> world_;
  std::map<Axis, std::unique_ptr<Communicator>> groups_;
};

// Runs `body` and turns any exception into a logged, rank-tagged error and a non-zero end of the whole job:
// MPI_Abort when MPI runs (no peer waits forever), the return value 1 (user error) or 2 (internal) otherwise.
int RunOrAbort(const std::function<int()>& body);

}  // namespace cornstarch
