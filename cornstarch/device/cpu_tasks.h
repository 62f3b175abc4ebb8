// Independent CPU tasks spread over the intra-op threads, each task's GEMMs and LibTorch ops on its own thread.
//
// Why not at::parallel_for: OpenBLAS-on-OpenMP GEMMs called at the same time from the threads of LibTorch's OpenMP
// parallel region scale badly. Measured on this project's 2-core VM (OpenBLAS 0.3.21, LibTorch 1.13), two
// concurrent single-threaded [2048 x 1024] x [1024 x 64] products: 115 GFLOP/s from an OpenMP region, 165-173 from
// two plain threads, 94 on one thread; the bitfield kernel's score tiles 123 vs 194. The CPU attention kernels run
// many such products at once, so their tasks run here: on the caller and helper threads that live as long as the
// process (a thread made per call set up its allocator arena and BLAS buffers each time: the tiny config ran 4x
// slower) and sleep between jobs, each with an OpenMP count of 1, so a GEMM or LibTorch op in a task runs on its
// task's thread without a nested team.
#pragma once

#include <cstdint>
#include <functional>

namespace cornstarch {

// Runs task(i) for every i in [0, count) on at most at::get_num_threads() threads (the caller's among them), taking
// tasks in order as threads come free (tasks of unequal size balance themselves). Tasks run with the caller's grad
// mode and autocast off. Called inside a parallel region, or while another thread's tasks hold the helpers, it runs
// every task on the calling thread. The first exception a task throws is rethrown here once every thread has
// stopped; tasks not yet started then do not run.
void ParallelTasks(int64_t count, const std::function<void(int64_t)>& task);

}  // namespace cornstarch
