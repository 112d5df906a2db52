#include "server/service/codec_pool.h"

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace turbokv::server {

CodecPool::CodecPool(std::string name, int threads, size_t max_queued)
    : name_(std::move(name)), max_queued_(max_queued < 1 ? 1 : max_queued) {
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

bool CodecPool::Submit(Task task, OnException on_exception) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (queue_.size() >= max_queued_) return false;
    queue_.push_back({std::move(task), std::move(on_exception)});
  }
  cv_.notify_one();
  return true;
}

size_t CodecPool::queued() const {
  std::lock_guard<std::mutex> l(mu_);
  return queue_.size();
}

void CodecPool::RunGuarded(Item& item) {
  std::string what;
  try {
    item.task();
    return;
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
    what = "an exception that is not a std::exception";
  }
  exceptions_.fetch_add(1);
  const absl::Status status = absl::InternalError(
      absl::StrCat("turbokv-server bug: a ", name_, " pool task threw: ", what));
  spdlog::error("{}", std::string(status.message()));
  if (!item.on_exception) return;
  try {
    item.on_exception(status);
  } catch (...) {
    spdlog::error("{} pool: the failure handler of a task threw too; the call may not finish",
                  name_);
  }
}

void CodecPool::Run() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    RunGuarded(item);
  }
}

absl::Status PoolFull(const CodecPool& pool) {
  return absl::ResourceExhaustedError(
      absl::StrCat("the server's ", pool.name(), " queue is full (", pool.max_queued(),
                   " tasks waiting; --max-queued-tasks); retry later"));
}

}  // namespace turbokv::server
