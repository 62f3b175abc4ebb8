// Background batch preparation: decoding and preprocessing run on threads while the step computes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "cornstarch/data/dataset.h"

namespace cornstarch {

// Serves dataset.Get for the requests 0, 1, 2, ... in order, where `request(i)` says which slice the i-th is.
// Up to `depth` batches are prepared ahead by `workers` threads, each taking the next request not yet taken (so
// batches are prepared side by side and handed out in order); depth 0 prepares each one in Next. An exception
// thrown while preparing request i is rethrown by the Next that asks for it.
class BatchLoader {
 public:
  struct Slice {
    int64_t first = 0, count = 0;
  };

  BatchLoader(const Dataset& data, std::function<Slice(int64_t)> request, int64_t depth, int64_t workers = 1);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  Batch Next();

 private:
  struct Ready {
    Batch batch;
    std::exception_ptr error;
  };
  void Work();

  const Dataset& data_;
  std::function<Slice(int64_t)> request_;
  const int64_t depth_;
  int64_t next_ = 0;   // next request Next returns
  int64_t taken_ = 0;  // next request a worker takes
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Ready> ready_;  // prepared, by request
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace cornstarch
