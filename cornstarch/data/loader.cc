#include "cornstarch/data/loader.h"

namespace cornstarch {

BatchLoader::BatchLoader(const Dataset& data, std::function<Slice(int64_t)> request, int64_t depth)
    : data_(data), request_(std::move(request)), depth_(depth) {
  if (depth_ > 0) worker_ = std::thread([this] { Work(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void BatchLoader::Work() {
  for (int64_t i = 0;; ++i) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || static_cast<int64_t>(ready_.size()) < depth_; });
      if (stop_) return;
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
      ready_.push_back(std::move(r));
    }
    cv_.notify_all();
    if (failed) return;  // nothing after a failed request is asked for
  }
}

Batch BatchLoader::Next() {
  if (depth_ == 0) {
    const Slice s = request_(next_++);
    return data_.Get(s.first, s.count);
  }
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty(); });
  Ready r = std::move(ready_.front());
  ready_.pop_front();
  lock.unlock();
  cv_.notify_all();
  if (r.error) std::rethrow_exception(r.error);
  return std::move(r.batch);
}

}  // namespace cornstarch
