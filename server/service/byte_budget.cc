#include "server/service/byte_budget.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace turbokv::server {

ByteBudget::ByteBudget(uint64_t limit_bytes)
    : limit_(limit_bytes), timer_([this] { TimerLoop(); }) {}

ByteBudget::~ByteBudget() {
  Shutdown();
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  timer_cv_.notify_all();
  timer_.join();
}

ByteBudget::Ticket ByteBudget::Acquire(uint64_t bytes, std::chrono::milliseconds timeout,
                                       Callback done) {
  std::unique_lock<std::mutex> l(mu_);
  if (waiters_.empty() && FitsLocked(bytes)) {
    in_use_ += bytes;
    return 0;
  }
  const Ticket ticket = ++next_ticket_;
  waiters_.push_back({ticket, bytes, std::chrono::steady_clock::now() + timeout, std::move(done)});
  l.unlock();
  timer_cv_.notify_all();
  return ticket;
}

bool ByteBudget::Cancel(Ticket ticket) {
  if (ticket == 0) return false;
  std::list<Callback> ready;
  bool removed = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      if (it->ticket == ticket) {
        waiters_.erase(it);
        removed = true;
        break;
      }
    }
    if (removed) GrantLocked(&ready);  // the head may have been the one blocking others
  }
  for (Callback& c : ready) c(absl::OkStatus());
  return removed;
}

void ByteBudget::Release(uint64_t bytes) {
  if (bytes == 0) return;
  std::list<Callback> ready;
  {
    std::lock_guard<std::mutex> l(mu_);
    in_use_ = bytes > in_use_ ? 0 : in_use_ - bytes;
    GrantLocked(&ready);
  }
  for (Callback& c : ready) c(absl::OkStatus());
}

void ByteBudget::Take(uint64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  in_use_ += bytes;
}

void ByteBudget::GrantLocked(std::list<Callback>* ready) {
  while (!waiters_.empty() && FitsLocked(waiters_.front().bytes)) {
    in_use_ += waiters_.front().bytes;
    ready->push_back(std::move(waiters_.front().done));
    waiters_.pop_front();
  }
}

void ByteBudget::Shutdown() {
  std::list<Waiter> failed;
  {
    std::lock_guard<std::mutex> l(mu_);
    failed.swap(waiters_);
  }
  for (Waiter& w : failed) w.done(absl::UnavailableError("turbokv-server is shutting down"));
}

uint64_t ByteBudget::in_use() const {
  std::lock_guard<std::mutex> l(mu_);
  return in_use_;
}

uint64_t ByteBudget::rejected() const {
  std::lock_guard<std::mutex> l(mu_);
  return rejected_;
}

void ByteBudget::TimerLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (waiters_.empty()) {
      timer_cv_.wait(l);
      continue;
    }
    auto earliest = waiters_.front().deadline;
    for (const Waiter& w : waiters_) earliest = std::min(earliest, w.deadline);
    timer_cv_.wait_until(l, earliest);
    const auto now = std::chrono::steady_clock::now();
    std::list<std::pair<Callback, uint64_t>> expired;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline <= now) {
        expired.emplace_back(std::move(it->done), it->bytes);
        it = waiters_.erase(it);
        ++rejected_;
      } else {
        ++it;
      }
    }
    if (expired.empty()) continue;
    std::list<Callback> ready;
    GrantLocked(&ready);
    l.unlock();
    for (auto& [done, bytes] : expired) {
      done(absl::ResourceExhaustedError(absl::StrCat(
          "the server's in-flight budget (--max-in-flight-bytes ", limit_,
          ") stayed spent while this call waited for ", bytes, " bytes; retry later")));
    }
    for (Callback& c : ready) c(absl::OkStatus());
    // Callables may own their caller (a reactor's reference): dropped outside the lock.
    expired.clear();
    ready.clear();
    l.lock();
  }
}

}  // namespace turbokv::server
