#include "cornstarch/data/loader.h"

namespace cornstarch {

BatchLoader::BatchLoader(const Dataset& data, std::function<Slice(int64_t)> request, int64_t depth, int64_t workers)
    : data_(data), request_(std::move(request)), depth_(depth) {
  if (depth_ > 0) {
    for (int64_t w = 0; w < workers; ++w) workers_.emplace_back([this] { Work(); });
  }
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& w : workers_) w.join();
}

void BatchLoader::Work() {
  while (true) {
    int64_t i;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || taken_ - next_ < depth_; });
      if (stop_) return;
      i = taken_++;
    }
    Ready r;
    try {
      const Slice s = request_(i);
      r.batch = data_.Get(s.first, s.count);
    } catch (...) {
      r.error = std::current_exception();
    }
    const bool failed = r.error != nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.emplace(i, std::move(r));
      if (failed) stop_ = true;  // nothing after a failed request is asked for
    }
    cv_.notify_all();
    if (failed) return;
  }
}

Batch BatchLoader::Next() {
  if (depth_ == 0) {
    const Slice s = request_(next_++);
    return data_.Get(s.first, s.count);
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ready_.count(next_) > 0; });
  Ready r = std::move(ready_.at(next_));
  ready_.erase(next_++);
  lock.unlock();
  cv_.notify_all();
  if (r.error) std::rethrow_exception(r.error);
  return std::move(r.batch);
}

}  // namespace cornstarch
