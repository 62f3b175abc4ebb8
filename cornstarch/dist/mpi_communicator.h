// MPI communicator for CPU tensors (OpenMPI). Every operation is started non-blocking and polled against the
// timeout, so a rank that never arrives is reported by name instead of hanging the job.
#pragma once

#include <memory>

#include "cornstarch/dist/communicator.h"

namespace cornstarch {

// Initialises MPI once per process (thread level: serialized) with errors returned, not fatal, so they can be
// reported. Finalised at exit.
void InitMpi(int* argc, char*** argv);
bool MpiInitialized();

// MPI_COMM_WORLD. `timeout_seconds` bounds every operation of it and of the communicators split from it.
std::unique_ptr<Communicator> MakeMpiWorldCommunicator(double timeout_seconds);

// Ends the whole job with `code`: MPI_Abort when MPI is running (every rank dies, none waits), exit otherwise.
[[noreturn]] void AbortJob(int code);

}  // namespace cornstarch
