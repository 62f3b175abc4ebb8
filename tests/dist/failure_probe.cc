// Drives the failure paths under mpirun (tests/dist/failure_test.sh):
//   throw    rank 1 throws while rank 0 waits in a barrier: the job must end at once, non-zero.
//   timeout  rank 0 never joins the barrier: the others must report the stuck operation, name world rank 0 as the
//            one that did not arrive (and not each other: they answer each other's roll call), and end the job.
//   p2p      in a group whose ranks run opposite to the world's, world rank 1 waits for a message world rank 0
//            never sends: the report must name world rank 0, not its rank in the group.
#include <ATen/ATen.h>

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
    auto world = cornstarch::MakeMpiWorldCommunicator(mode == "throw" ? 60.0 : 1.0);
    if (mode == "throw") {
      if (world->rank() == 1) throw cornstarch::Error("rank 1 failed on purpose");
      world->Barrier();
    } else if (mode == "timeout") {
      if (world->rank() == 0) std::this_thread::sleep_for(std::chrono::seconds(30));
      else world->Barrier();
    } else if (mode == "p2p") {
      auto reversed = world->Split(0, world->size() - 1 - world->rank(), "reversed");
      if (world->rank() == 0) {
        std::this_thread::sleep_for(std::chrono::seconds(30));
      } else {
        at::Tensor t = at::zeros({1});
        reversed->Recv(t, reversed->size() - 1, 5);  // world rank 0
      }
    }
    return 0;
  });
}
