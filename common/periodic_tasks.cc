#include "common/periodic_tasks.h"

#include <pthread.h>

#include <exception>
#include <set>
#include <utility>

#include "spdlog/spdlog.h"

namespace turbokv {

PeriodicTasks::Handle::Handle(Handle&& other) noexcept
    : service_(std::exchange(other.service_, nullptr)), id_(std::exchange(other.id_, 0)) {}

PeriodicTasks::Handle& PeriodicTasks::Handle::operator=(Handle&& other) noexcept {
  if (this != &other) {
    Cancel();
    service_ = std::exchange(other.service_, nullptr);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

void PeriodicTasks::Handle::Trigger() const {
  if (service_ != nullptr) service_->Trigger(id_);
}

void PeriodicTasks::Handle::SetInterval(Clock::duration interval) const {
  if (service_ != nullptr) service_->SetInterval(id_, interval);
}

void PeriodicTasks::Handle::Cancel() {
  if (service_ == nullptr) return;
  std::exchange(service_, nullptr)->Remove(std::exchange(id_, 0));
}

PeriodicTasks::PeriodicTasks(std::string thread_name)
    : PeriodicTasks([] { return Clock::now(); }, /*start_thread=*/true, std::move(thread_name)) {}

PeriodicTasks::PeriodicTasks(NowFn now, bool start_thread, std::string thread_name)
    : now_(std::move(now)) {
  if (!start_thread) return;
  thread_ = std::thread([this, name = std::move(thread_name)] {
    pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
    Loop();
  });
}

std::unique_ptr<PeriodicTasks> PeriodicTasks::ManualForTest(NowFn now) {
  return std::unique_ptr<PeriodicTasks>(
      new PeriodicTasks(std::move(now), /*start_thread=*/false, ""));
}

PeriodicTasks::~PeriodicTasks() { Shutdown(); }

void PeriodicTasks::Shutdown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

PeriodicTasks::Handle PeriodicTasks::Add(std::string name, Clock::duration interval, Task task) {
  std::lock_guard<std::mutex> l(mu_);
  if (stop_) return Handle();
  const uint64_t id = ++next_id_;
  Entry& e = tasks_[id];
  e.name = std::move(name);
  e.interval = interval;
  e.next = now_() + interval;
  e.task = std::make_shared<Task>(std::move(task));
  wake_cv_.notify_all();
  return Handle(this, id);
}

void PeriodicTasks::Remove(uint64_t id) {
  std::unique_lock<std::mutex> l(mu_);
  tasks_.erase(id);
  // A run in progress on another thread holds the task's function (and what it captured):
  // wait for it, unless this is that run removing its own task.
  idle_cv_.wait(l, [&] { return running_ != id || running_thread_ == std::this_thread::get_id(); });
}

void PeriodicTasks::Trigger(uint64_t id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return;
  if (running_ == id) {
    it->second.triggered = true;
  } else {
    it->second.next = now_();
  }
  wake_cv_.notify_all();
}

void PeriodicTasks::SetInterval(uint64_t id, Clock::duration interval) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return;
  it->second.interval = interval;
  it->second.next = now_() + interval;
  wake_cv_.notify_all();
}

std::vector<PeriodicTasks::TaskStatus> PeriodicTasks::Snapshot() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<TaskStatus> out;
  out.reserve(tasks_.size());
  for (const auto& [id, e] : tasks_) {
    out.push_back(TaskStatus{e.name, e.interval, e.runs, e.failures, e.last});
  }
  return out;
}

std::map<uint64_t, PeriodicTasks::Entry>::iterator PeriodicTasks::EarliestLocked() {
  auto best = tasks_.end();
  for (auto it = tasks_.begin(); it != tasks_.end(); ++it) {
    if (best == tasks_.end() || it->second.next < best->second.next) best = it;
  }
  return best;
}

void PeriodicTasks::RunLocked(std::unique_lock<std::mutex>& l, uint64_t id) {
  Entry& before = tasks_.at(id);
  std::shared_ptr<Task> task = before.task;
  const std::string name = before.name;
  running_ = id;
  running_thread_ = std::this_thread::get_id();
  l.unlock();
  absl::Status status;
  try {
    status = (*task)();
  } catch (const std::exception& e) {
    status = absl::InternalError(std::string("exception: ") + e.what());
  } catch (...) {
    status = absl::InternalError("unknown exception");
  }
  task.reset();  // what the task captured goes before its Handle's Cancel() returns
  l.lock();
  running_ = 0;
  running_thread_ = std::thread::id();
  idle_cv_.notify_all();
  auto it = tasks_.find(id);
  if (it == tasks_.end()) return;  // cancelled during the run
  Entry& e = it->second;
  ++e.runs;
  const bool report = !status.ok() && (e.last.ok() || e.last.message() != status.message());
  const bool recovered = status.ok() && !e.last.ok();
  if (!status.ok()) ++e.failures;
  e.last = status;
  e.next = std::exchange(e.triggered, false) ? now_() : now_() + e.interval;
  if (report) {
    spdlog::warn(
        "periodic task '{}' failed (failure {} of {} runs; logged again when the error "
        "changes): {}",
        name, e.failures, e.runs, status.ToString());
  } else if (recovered) {
    spdlog::info("periodic task '{}' ran fine again after {} failures", name, e.failures);
  }
}

void PeriodicTasks::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    auto first = EarliestLocked();
    if (first == tasks_.end()) {
      wake_cv_.wait(l);
      continue;
    }
    if (first->second.next > now_()) {
      wake_cv_.wait_until(l, first->second.next);
      continue;
    }
    RunLocked(l, first->first);
  }
}

size_t PeriodicTasks::RunDueForTest() {
  std::unique_lock<std::mutex> l(mu_);
  std::set<uint64_t> ran;
  size_t runs = 0;
  while (!stop_) {
    const Clock::time_point now = now_();
    auto best = tasks_.end();
    for (auto it = tasks_.begin(); it != tasks_.end(); ++it) {
      if (it->second.next > now || ran.count(it->first) != 0) continue;
      if (best == tasks_.end() || it->second.next < best->second.next) best = it;
    }
    if (best == tasks_.end()) break;
    ran.insert(best->first);
    RunLocked(l, best->first);
    ++runs;
  }
  return runs;
}

}  // namespace turbokv
