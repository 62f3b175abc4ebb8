// Background batch preparation: decoding and preprocessing run on a thread while the step computes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "cornstarch/data/dataset.h"

namespace cornstarch {

// Serves dataset.Get for the requests 0, 1, 2, ... in order, where `request(i)` says which slice the i-th is.
// Up to `depth` batches are prepared ahead; depth 0 prepares each one in Next. An exception thrown while
// preparing request i is rethrown by the Next that asks for it.
class BatchLoader {
 public:
  struct Slice {
    int64_t first = 0, count = 0;
  };

  BatchLoader(const Dataset& data, std::function<Slice(int64_t)> request, int64_t depth);
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
  int64_t next_ = 0;  // next request Next returns (depth 0) or the worker prepares
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Ready> ready_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace cornstarch
