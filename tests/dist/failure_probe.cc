// Drives the failure paths under mpirun (tests/dist/failure_test.sh):
//   throw    rank 1 throws while rank 0 waits in a barrier: the job must end at once, non-zero.
//   timeout  rank 0 never joins the barrier: rank 1 must report the stuck operation and end the job.
#include <chrono>
#include <string>
#include <thread>

#include "cornstarch/dist/launch_env.h"
#include "cornstarch/dist/mpi_communicator.h"
#include "cornstarch/dist/runtime.h"
#include "cornstarch/base/check.h"
#include "cornstarch/base/logging.h"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  cornstarch::InitLogging(cornstarch::DetectLaunchEnv().rank, "info");
  return cornstarch::RunOrAbort([&] {
    cornstarch::InitMpi(&argc, &argv);
    auto world = cornstarch::MakeMpiWorldCommunicator(mode == "timeout" ? 1.0 : 60.0);
    if (mode == "throw") {
      if (world->rank() == 1) throw cornstarch::Error("rank 1 failed on purpose");
      world->Barrier();
    } else if (mode == "timeout") {
      if (world->rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(30));
      else world->Barrier();
    }
    return 0;
  });
}
