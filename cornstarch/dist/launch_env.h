// Where this process sits in the job, read from the launcher's environment. Sources, in this order (the first
// whose variables are present wins):
//   1. OpenMPI (mpirun):  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_SIZE,
//                         OMPI_COMM_WORLD_LOCAL_SIZE
//   2. Slurm (srun):      SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NTASKS_PER_NODE
//   3. torchrun-style:    RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE
//   4. none of them:      a single process (rank 0 of 1)
// Pure: the environment is passed in, so tests need no launcher.
#pragma once

#include <functional>
#include <string>

namespace cornstarch {

struct LaunchEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;  // ranks on this node (1 when the launcher does not say); they share its cores
  std::string source = "single process";  // names the variables used, for error messages
};

using GetEnvFn = std::function<const char*(const char*)>;

// Throws Error naming the variable when a value is missing or malformed (e.g. rank >= world size).
LaunchEnv DetectLaunchEnv(const GetEnvFn& getenv);
LaunchEnv DetectLaunchEnv();  // from the process environment

}  // namespace cornstarch
