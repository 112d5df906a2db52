#include "server/service/call_watchdog.h"

namespace turbokv::server {

CallWatchdog::CallWatchdog() : thread_([this] { Loop(); }) {}

CallWatchdog::~CallWatchdog() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::map<std::pair<Clock::time_point, Handle>, std::function<void()>> dropped;
  {
    std::lock_guard<std::mutex> l(mu_);
    dropped.swap(entries_);
    when_.clear();
  }
}

CallWatchdog::Handle CallWatchdog::Arm(Clock::time_point when, std::function<void()> fire) {
  bool earliest = false;
  Handle h = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    h = ++next_;
    earliest = entries_.empty() || when < entries_.begin()->first.first;
    entries_.emplace(std::make_pair(when, h), std::move(fire));
    when_.emplace(h, when);
  }
  if (earliest) cv_.notify_all();
  return h;
}

std::function<void()> CallWatchdog::Disarm(Handle handle) {
  std::lock_guard<std::mutex> l(mu_);
  auto w = when_.find(handle);
  if (w == when_.end()) return {};
  auto e = entries_.find({w->second, handle});
  std::function<void()> fire = std::move(e->second);
  entries_.erase(e);
  when_.erase(w);
  return fire;
}

size_t CallWatchdog::armed() const {
  std::lock_guard<std::mutex> l(mu_);
  return entries_.size();
}

void CallWatchdog::Loop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (entries_.empty()) {
      cv_.wait(l);
      continue;
    }
    const auto first = entries_.begin();
    if (first->first.first > Clock::now()) {
      cv_.wait_until(l, first->first.first);
      continue;
    }
    std::function<void()> fire = std::move(first->second);
    when_.erase(first->first.second);
    entries_.erase(first);
    l.unlock();
    fire();
    fire = nullptr;  // may own a caller: dropped without the lock
    l.lock();
  }
}

}  // namespace turbokv::server
