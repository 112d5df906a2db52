#include "server/service/call_watch.h"

#include <utility>

namespace turbokv::server {

void CallWatch::Arm(CallWatchdog::Clock::time_point when, std::function<void()> fire) {
  std::lock_guard<std::mutex> l(mu_);
  if (done_) return;
  handle_ = watchdog_->Arm(when, std::move(fire));
}

bool CallWatch::Fired() {
  std::lock_guard<std::mutex> l(mu_);
  handle_ = 0;
  return !done_;
}

void CallWatch::TryCancel() {
  // Under mu_: Done() (OnDone) waits for it, so the context is still there.
  std::lock_guard<std::mutex> l(mu_);
  if (!done_) context_->TryCancel();
}

void CallWatch::Done() {
  CallWatchdog::Handle h = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    done_ = true;
    h = std::exchange(handle_, 0);
  }
  // The entry's callable (and the reactor reference it holds) is destroyed here, unlocked.
  if (h != 0) (void)watchdog_->Disarm(h);
}

}  // namespace turbokv::server
