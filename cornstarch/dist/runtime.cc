#include "cornstarch/dist/runtime.h"

#include <mpi.h>

#include <exception>

#include "cornstarch/dist/mpi_communicator.h"
#include "cornstarch/base/check.h"
#include "cornstarch/base/logging.h"

namespace cornstarch {

DistRuntime::DistRuntime(const ParallelConfig& parallel, const LaunchEnv& env, int* argc, char*** argv)
    : env_(env),
      dims_(static_cast<int>(parallel.pp), static_cast<int>(parallel.dp), static_cast<int>(parallel.cp),
            static_cast<int>(parallel.tp), env.world_size, env.source) {
  if (env_.world_size == 1) {
    world_ = MakeSingleProcessCommunicator();
  } else {
    InitMpi(argc, argv);
    world_ = MakeMpiWorldCommunicator(parallel.timeout_seconds);
    if (world_->rank() != env_.rank || world_->size() != env_.world_size) {
      throw Error(env_.source + ": the launcher says rank " + std::to_string(env_.rank) + " of " +
                  std::to_string(env_.world_size) + ", MPI says rank " + std::to_string(world_->rank()) + " of " +
                  std::to_string(world_->size()));
    }
  }
  for (Axis axis : {Axis::kPP, Axis::kDP, Axis::kCP, Axis::kTP}) {
    const std::vector<int> ranks = dims_.GroupRanks(env_.rank, axis);
    groups_[axis] = world_->Split(dims_.GroupColor(env_.rank, axis), dims_.CoordOf(env_.rank)[axis], AxisName(axis));
    CS_CHECK(groups_[axis]->size() == static_cast<int>(ranks.size()), AxisName(axis), " group has ",
             groups_[axis]->size(), " ranks, the mesh says ", ranks.size());
  }
}

DistRuntime::~DistRuntime() = default;

int RunOrAbort(const std::function<int()>& body) {
  int code = 0;
  try {
    return body();
  } catch (const Error& e) {
    spdlog::error("{}", e.what());
    code = 1;
  } catch (const std::exception& e) {
    spdlog::critical("internal error: {}", e.what());
    code = 2;
  }
  if (MpiInitialized()) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) AbortJob(code);
  }
  return code;
}

}  // namespace cornstarch
