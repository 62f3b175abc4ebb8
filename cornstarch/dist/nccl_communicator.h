// NCCL communicator for CUDA tensors: one CUDA stream per communicator (so its operations overlap the compute on
// LibTorch's current stream, after which they are ordered), the NCCL unique id broadcast over a CPU bootstrap
// communicator (MPI). Waiting is the device's: Work::Wait makes the current stream wait for the operation and
// returns, and a watchdog thread (dist/watchdog.h) polls each operation against the timeout together with NCCL's
// asynchronous error state; a stuck or failed operation aborts the NCCL communicator and the job, naming the rank
// and operation. Compiled and linked on every machine; it runs only where a GPU is present.
#pragma once

#include <ATen/core/ScalarType.h>

#include <memory>
#include <string>

#include "cornstarch/dist/communicator.h"

namespace cornstarch {

// Collective over `bootstrap`: every rank of it joins one NCCL communicator on CUDA device `device`.
std::unique_ptr<Communicator> MakeNcclCommunicator(Communicator& bootstrap, int device, double timeout_seconds,
                                                   const std::string& name);

// NCCL's data type (ncclDataType_t as int) for a tensor dtype; throws for dtypes NCCL cannot move.
int NcclDataType(at::ScalarType type);

// The linked NCCL's version code (e.g. 22809 for 2.28.9).
int NcclVersion();

}  // namespace cornstarch
