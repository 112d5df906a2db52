#include "server/service/codec_pool.h"

#include <utility>

namespace turbokv::server {

CodecPool::CodecPool(int threads) {
  if (threads < 1) threads = 1;
  workers_.reserve(threads);
  for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Run(); });
}

CodecPool::~CodecPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void CodecPool::Submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void CodecPool::Run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

}  // namespace turbokv::server
