// Catch2 main for tests run under mpirun: every rank runs every test case in the same order.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "cornstarch/dist/launch_env.h"
#include "cornstarch/dist/mpi_communicator.h"
#include "cornstarch/base/logging.h"

int main(int argc, char** argv) {
  cornstarch::InitMpi(&argc, &argv);
  cornstarch::InitLogging(cornstarch::DetectLaunchEnv().rank, "warn");
  return Catch::Session().run(argc, argv);
}
