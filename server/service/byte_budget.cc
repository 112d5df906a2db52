#include "server/service/byte_budget.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace turbokv::server {

struct ByteBudget::Tenant {
  std::string name;
  uint64_t in_use = 0;
  uint64_t waiting_held = 0;  // bytes held by this tenant's leases that wait
  int accounts = 0;           // open leases
};

ByteBudget::ByteBudget(uint64_t limit_bytes, double tenant_share)
    : limit_(limit_bytes),
      tenant_limit_(std::max<uint64_t>(
          1, static_cast<uint64_t>(std::floor(static_cast<double>(limit_bytes) *
                                              std::clamp(tenant_share, 0.0, 1.0))))),
      timer_([this] { TimerLoop(); }) {}

ByteBudget::~ByteBudget() {
  Shutdown();
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  timer_cv_.notify_all();
  timer_.join();
}

std::unique_ptr<ByteBudget::Account> ByteBudget::Open(std::string_view tenant) {
  auto a = std::make_unique<Account>();
  std::lock_guard<std::mutex> l(mu_);
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) {
    auto t = std::make_unique<Tenant>();
    t->name = std::string(tenant);
    it = tenants_.emplace(t->name, std::move(t)).first;
  }
  a->tenant = it->second.get();
  ++a->tenant->accounts;
  return a;
}

void ByteBudget::Close(std::unique_ptr<Account> account) {
  std::list<Callback> ready;
  Callback dropped;
  {
    std::lock_guard<std::mutex> l(mu_);
    Account* a = account.get();
    if (a->waiting) {
      dropped = std::move(a->waiter->done);
      waiting_held_ -= a->held;
      a->tenant->waiting_held -= a->held;
      waiters_.erase(a->waiter);
      a->waiting = false;
    }
    SubHeldLocked(a, a->held);
    --a->tenant->accounts;
    DropTenantIfIdleLocked(a->tenant);
    GrantLocked(&ready);
  }
  for (Callback& c : ready) c(absl::OkStatus());
  // `dropped` and the granted callables may own their callers: destroyed outside the lock.
}

bool ByteBudget::FitsTenantLocked(const Tenant& t, uint64_t bytes) const {
  return t.in_use + bytes <= tenant_limit_;
}

bool ByteBudget::Acquire(Account* a, uint64_t bytes, std::chrono::milliseconds timeout,
                         Callback done) {
  std::unique_lock<std::mutex> l(mu_);
  bool tenant_waits = false;
  for (const Waiter& w : waiters_) {
    if (w.account->tenant == a->tenant) {
      tenant_waits = true;
      break;
    }
  }
  // Nothing in use at all, or nothing of this tenant's: granted whatever its size (the
  // progress rule of byte_budget.h, taken at once) unless the other limit says no.
  const bool fits_tenant = FitsTenantLocked(*a->tenant, bytes) || a->tenant->in_use == a->held;
  const bool fits = FitsLocked(bytes) || in_use_ == a->held;
  if (!shutdown_ && !tenant_waits && fits_tenant && fits) {
    if (!FitsTenantLocked(*a->tenant, bytes) || !FitsLocked(bytes)) ++forced_;
    AddHeldLocked(a, bytes);
    return false;
  }
  a->waiting = true;
  a->waiter = waiters_.insert(
      waiters_.end(), {a, bytes, std::chrono::steady_clock::now() + timeout, std::move(done)});
  waiting_held_ += a->held;
  a->tenant->waiting_held += a->held;
  // The new waiter may be what makes every holder a waiter (the progress rule).
  // Never run on the caller's thread: the caller may hold its own lock, which `done` takes.
  if (!shutdown_) GrantLocked(&deliver_);
  l.unlock();
  timer_cv_.notify_all();
  return true;
}

bool ByteBudget::Cancel(Account* a) {
  std::list<Callback> ready;
  Callback dropped;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!a->waiting) return false;
    dropped = std::move(a->waiter->done);
    waiting_held_ -= a->held;
    a->tenant->waiting_held -= a->held;
    waiters_.erase(a->waiter);
    a->waiting = false;
    GrantLocked(&ready);  // the head may have been the one blocking others
  }
  for (Callback& c : ready) c(absl::OkStatus());
  return true;
}

void ByteBudget::Release(Account* a, uint64_t bytes) {
  if (bytes == 0) return;
  std::list<Callback> ready;
  {
    std::lock_guard<std::mutex> l(mu_);
    SubHeldLocked(a, std::min(bytes, a->held));
    GrantLocked(&ready);
  }
  for (Callback& c : ready) c(absl::OkStatus());
}

void ByteBudget::Take(Account* a, uint64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  AddHeldLocked(a, bytes);
}

uint64_t ByteBudget::held(const Account* a) const {
  std::lock_guard<std::mutex> l(mu_);
  return a->held;
}

void ByteBudget::AddHeldLocked(Account* a, uint64_t bytes) {
  a->held += bytes;
  a->tenant->in_use += bytes;
  in_use_ += bytes;
  if (a->waiting) {
    a->tenant->waiting_held += bytes;
    waiting_held_ += bytes;
  }
}

void ByteBudget::SubHeldLocked(Account* a, uint64_t bytes) {
  a->held -= bytes;
  a->tenant->in_use -= bytes;
  in_use_ -= bytes;
  if (a->waiting) {
    a->tenant->waiting_held -= bytes;
    waiting_held_ -= bytes;
  }
}

void ByteBudget::DropTenantIfIdleLocked(Tenant* t) {
  if (t->accounts == 0 && t->in_use == 0) tenants_.erase(t->name);
}

void ByteBudget::GrantOneLocked(std::list<Waiter>::iterator it, std::list<Callback>* ready) {
  Account* a = it->account;
  waiting_held_ -= a->held;
  a->tenant->waiting_held -= a->held;
  a->waiting = false;
  AddHeldLocked(a, it->bytes);
  ready->push_back(std::move(it->done));
  waiters_.erase(it);
}

void ByteBudget::GrantLocked(std::list<Callback>* ready) {
  if (shutdown_) return;
  // 1. What fits: each tenant's waiters in arrival order, a tenant whose first waiter does not
  //    fit skipped (it holds up only its own later waiters).
  std::set<const Tenant*> blocked;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    const Tenant* t = it->account->tenant;
    if (blocked.count(t) != 0) {
      ++it;
      continue;
    }
    if (FitsTenantLocked(*t, it->bytes) && FitsLocked(it->bytes)) {
      auto next = std::next(it);
      GrantOneLocked(it, ready);
      it = next;
      continue;
    }
    blocked.insert(t);
    ++it;
  }
  if (waiters_.empty()) return;
  // 2. Progress: every byte in use is held by a waiter (nothing will be given back), so the
  //    waiter holding the most goes over both limits.
  auto most = [](std::list<Waiter>::iterator a, std::list<Waiter>::iterator b) {
    return b->account->held > a->account->held ? b : a;  // the earliest on a tie
  };
  if (in_use_ == waiting_held_) {
    auto best = waiters_.begin();
    for (auto it = std::next(best); it != waiters_.end(); ++it) best = most(best, it);
    ++forced_;
    GrantOneLocked(best, ready);
    return;
  }
  // 3. The same within each tenant's share, where the whole budget has room.
  std::vector<const Tenant*> stuck;
  for (const Waiter& w : waiters_) {
    const Tenant* t = w.account->tenant;
    if (t->in_use == t->waiting_held && std::find(stuck.begin(), stuck.end(), t) == stuck.end()) {
      stuck.push_back(t);
    }
  }
  for (const Tenant* t : stuck) {
    auto best = waiters_.end();
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      if (it->account->tenant == t) best = best == waiters_.end() ? it : most(best, it);
    }
    if (best != waiters_.end() && FitsLocked(best->bytes)) {
      ++forced_;
      GrantOneLocked(best, ready);
    }
  }
}

void ByteBudget::Shutdown() {
  std::list<Waiter> failed;
  {
    std::lock_guard<std::mutex> l(mu_);
    shutdown_ = true;
    for (Waiter& w : waiters_) {
      waiting_held_ -= w.account->held;
      w.account->tenant->waiting_held -= w.account->held;
      w.account->waiting = false;
    }
    failed.swap(waiters_);
  }
  for (Waiter& w : failed) w.done(absl::UnavailableError("turbokv-server is shutting down"));
}

uint64_t ByteBudget::in_use() const {
  std::lock_guard<std::mutex> l(mu_);
  return in_use_;
}

uint64_t ByteBudget::tenant_in_use(std::string_view tenant) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second->in_use;
}

uint64_t ByteBudget::rejected() const {
  std::lock_guard<std::mutex> l(mu_);
  return rejected_;
}

uint64_t ByteBudget::forced_grants() const {
  std::lock_guard<std::mutex> l(mu_);
  return forced_;
}

void ByteBudget::TimerLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    if (!deliver_.empty()) {  // grants made while an Acquire queued its waiter
      std::list<Callback> ready;
      ready.swap(deliver_);
      l.unlock();
      for (Callback& c : ready) c(absl::OkStatus());
      ready.clear();
      l.lock();
      continue;
    }
    if (waiters_.empty()) {
      timer_cv_.wait(l);
      continue;
    }
    if (shutdown_) {  // an Acquire after Shutdown: failed here, never on the caller's thread
      std::list<Waiter> failed;
      for (Waiter& w : waiters_) {
        waiting_held_ -= w.account->held;
        w.account->tenant->waiting_held -= w.account->held;
        w.account->waiting = false;
      }
      failed.swap(waiters_);
      l.unlock();
      for (Waiter& w : failed) w.done(absl::UnavailableError("turbokv-server is shutting down"));
      failed.clear();
      l.lock();
      continue;
    }
    auto earliest = waiters_.front().deadline;
    for (const Waiter& w : waiters_) earliest = std::min(earliest, w.deadline);
    timer_cv_.wait_until(l, earliest);
    const auto now = std::chrono::steady_clock::now();
    std::list<std::pair<Callback, std::string>> expired;
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline > now) {
        ++it;
        continue;
      }
      Account* a = it->account;
      const Tenant& t = *a->tenant;
      std::string why =
          tenant_limit_ >= limit_ || FitsTenantLocked(t, it->bytes)
              ? absl::StrCat("the server's in-flight budget (--max-in-flight-bytes ", limit_,
                             ") stayed spent while this call waited for ", it->bytes,
                             " bytes; retry later")
              : absl::StrCat("this tenant's share of the in-flight budget (", tenant_limit_,
                             " bytes: --tenant-in-flight-share of "
                             "--max-in-flight-bytes ",
                             limit_,
                             ") stayed spent by its calls "
                             "while this call waited for ",
                             it->bytes, " bytes; retry later");
      waiting_held_ -= a->held;
      a->tenant->waiting_held -= a->held;
      a->waiting = false;
      expired.emplace_back(std::move(it->done), std::move(why));
      it = waiters_.erase(it);
      ++rejected_;
    }
    if (expired.empty()) continue;
    std::list<Callback> ready;
    GrantLocked(&ready);
    l.unlock();
    for (auto& [done, why] : expired) done(absl::ResourceExhaustedError(why));
    for (Callback& c : ready) c(absl::OkStatus());
    // Callables may own their caller (a reactor's reference): dropped outside the lock.
    expired.clear();
    ready.clear();
    l.lock();
  }
}

}  // namespace turbokv::server
