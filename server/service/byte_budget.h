// The server-wide budget of request bytes in flight (docs/server.md, "Limits"): put chunks
// received and not yet written, get responses built and not yet sent. A call takes bytes
// through its BudgetLease (budget_lease.h) before it reads or builds more; when the budget is
// spent it waits (backpressure: a put stream simply stops reading, so HTTP/2 flow control slows
// its client), and after `timeout` it gets RESOURCE_EXHAUSTED naming the limit.
//
// Tenants: every lease belongs to a tenant (Principal::tenant), and no tenant holds more than
// `tenant_limit()` = `tenant_share` x `limit` bytes, so one tenant's calls, idle or slow,
// leave the rest of the budget to the others. Waiters are served in arrival order within
// their tenant (a new call does not overtake a waiting one of its tenant); a tenant whose first
// waiter does not fit does not hold up the waiters of other tenants.
//
// Progress: a request is granted over a limit when nothing could otherwise free bytes for it:
// when every byte held under the limit (its tenant's share, or the whole budget) is held by
// leases that are themselves waiting (each holding part of a block that only more bytes
// complete, or nothing at all: so a request larger than the whole budget goes through alone).
// Then the waiter holding the most bytes is granted (it is the furthest into its block, so
// the overshoot is at most the rest of one block), the earliest one on a tie.
//
// Thread safety: all methods are thread-safe. Callbacks run without the budget's lock, on the
// thread that released bytes or on the budget's timer thread, never on the thread that called
// Acquire.
#ifndef TURBOKV_SERVER_SERVICE_BYTE_BUDGET_H_
#define TURBOKV_SERVER_SERVICE_BYTE_BUDGET_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace turbokv::server {

class BudgetLease;

class ByteBudget {
 public:
  // Gets OkStatus once the bytes are taken for the lease, or RESOURCE_EXHAUSTED (timed out) /
  // UNAVAILABLE (shutdown). Runs exactly once unless the wait was cancelled.
  using Callback = std::function<void(const absl::Status&)>;

  // `tenant_share`: the fraction of `limit_bytes` one tenant may hold, in (0, 1].
  explicit ByteBudget(uint64_t limit_bytes, double tenant_share = 1.0);
  ~ByteBudget();  // Shutdown(), then joins the timer thread; every lease must be gone
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Fails every waiter with UNAVAILABLE and every later Acquire that would wait.
  void Shutdown();

  uint64_t limit() const { return limit_; }
  uint64_t tenant_limit() const { return tenant_limit_; }
  uint64_t in_use() const;
  uint64_t tenant_in_use(std::string_view tenant) const;
  uint64_t rejected() const;  // waits that timed out, since start
  // Grants made over a limit because every holder was waiting (see above), since start.
  uint64_t forced_grants() const;

 private:
  friend class BudgetLease;  // the only way to take and give back bytes
  struct Tenant;
  struct Account;
  struct Waiter {
    Account* account;
    uint64_t bytes;
    std::chrono::steady_clock::time_point deadline;
    Callback done;
  };
  // One lease's state, owned by the lease; read and written under mu_ only.
  struct Account {
    Tenant* tenant = nullptr;
    uint64_t held = 0;
    bool waiting = false;
    std::list<Waiter>::iterator waiter;  // valid while waiting
  };

  std::unique_ptr<Account> Open(std::string_view tenant);
  void Close(std::unique_ptr<Account> account);  // gives back what it holds, cancels its wait
  // false: granted now. true: queued; `done` runs later on another thread (after Shutdown:
  // with UNAVAILABLE, from the timer thread).
  bool Acquire(Account* account, uint64_t bytes, std::chrono::milliseconds timeout, Callback done);
  bool Cancel(Account* account);  // true when its callback will not run
  void Release(Account* account, uint64_t bytes);
  void Take(Account* account, uint64_t bytes);
  uint64_t held(const Account* account) const;

  bool FitsTenantLocked(const Tenant& t, uint64_t bytes) const;
  bool FitsLocked(uint64_t bytes) const { return in_use_ + bytes <= limit_; }
  void GrantOneLocked(std::list<Waiter>::iterator it, std::list<Callback>* ready);
  // Grants what fits, then what must go over a limit for anything to move. Requires mu_.
  void GrantLocked(std::list<Callback>* ready);
  void AddHeldLocked(Account* a, uint64_t bytes);
  void SubHeldLocked(Account* a, uint64_t bytes);
  void DropTenantIfIdleLocked(Tenant* t);
  void TimerLoop();

  const uint64_t limit_;
  const uint64_t tenant_limit_;
  mutable std::mutex mu_;
  std::condition_variable timer_cv_;
  uint64_t in_use_ = 0;
  uint64_t waiting_held_ = 0;  // bytes held by leases that wait
  uint64_t rejected_ = 0;
  uint64_t forced_ = 0;
  std::map<std::string, std::unique_ptr<Tenant>, std::less<>> tenants_;
  std::list<Waiter> waiters_;    // arrival order
  std::list<Callback> deliver_;  // granted in Acquire, run by the timer thread
  bool shutdown_ = false;
  bool stop_ = false;
  // Fails waiters whose timeout passed and runs deliver_. Its own thread, not a task on the
  // server's PeriodicTasks (common/periodic_tasks.h): deliveries are on the request path of every
  // put and get, and must not wait behind a store maintenance pass (docs/architecture.md).
  std::thread timer_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_BYTE_BUDGET_H_
