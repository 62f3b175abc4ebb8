#include "cornstarch/device/cpu_tasks.h"

#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace cornstarch {

namespace {

// The calling thread's OpenMP thread count, set in the OpenMP runtime LibTorch loaded (the system's libgomp, or the
// copy a pip distribution bundles under another name): looked up, not linked, so the process holds one runtime.
// Without one (a LibTorch built without OpenMP) nothing nests and there is nothing to set.
void SetOpenMpThreads(int threads) {
  using Setter = void (*)(int);
  static const auto set = reinterpret_cast<Setter>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  if (set != nullptr) set(threads);
}

// One ParallelTasks call: its tasks, taken in order by whichever thread is free.
struct Job {
  int64_t count;
  const std::function<void(int64_t)>* task;
  bool grad;
  std::atomic<int64_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;

  void Work() {
    const c10::AutoGradMode grad_mode(grad);
    for (int64_t i = next++; i < count; i = next++) {
      try {
        (*task)(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = count;
      }
    }
  }
};

// Helper threads that live as long as the process: a thread made per call would set up its allocator arena and
// OpenBLAS's buffers afresh each time (measured: the tiny config 4x slower). Idle helpers sleep on a condition
// variable, so they take no core from LibTorch's own threads between jobs.
class Helpers {
 public:
  static Helpers& Get() {
    static Helpers* helpers = new Helpers;  // never destroyed: its threads sleep until the process ends
    return *helpers;
  }

  // Runs `job` on the calling thread and `extra` helpers; false (nothing run) when another thread's job holds them.
  bool Run(Job& job, int extra) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(threads_.size()) < extra) {
        threads_.emplace_back([this, index = static_cast<int>(threads_.size())] { Loop(index); });
      }
      job_ = &job;
      joining_ = extra;
      running_ = extra;
      ++generation_;
    }
    wake_.notify_all();
    job.Work();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return running_ == 0; });
    job_ = nullptr;
    return true;
  }

 private:
  void Loop(int index) {
    at::get_num_threads();  // LibTorch sets a new thread's OpenMP count on first use; the count set next then stays
    SetOpenMpThreads(1);
    uint64_t seen = 0;
    for (;;) {
      Job* job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen && index < joining_; });
        seen = generation_;
        job = job_;
      }
      job->Work();
      const std::lock_guard<std::mutex> lock(mutex_);
      if (--running_ == 0) done_.notify_one();
    }
  }

  std::mutex busy_;   // one job at a time
  std::mutex mutex_;  // guards what follows
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  Job* job_ = nullptr;
  int joining_ = 0, running_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace

void ParallelTasks(int64_t count, const std::function<void(int64_t)>& task) {
  Job job{count, &task, c10::GradMode::is_enabled()};
  // Inside a parallel region already (a caller's parallel_for), the region's threads are the ones to use.
  const int threads = at::in_parallel_region() ? 1 : static_cast<int>(std::min<int64_t>(at::get_num_threads(), count));
  const int saved = at::get_num_threads();
  SetOpenMpThreads(1);
  if (threads <= 1 || !Helpers::Get().Run(job, threads - 1)) job.Work();
  SetOpenMpThreads(saved);
  if (job.failure) std::rethrow_exception(job.failure);
}

}  // namespace cornstarch
