// One call's share of the in-flight budget (byte_budget.h): the bytes it holds, under its
// tenant, and at most one wait for more. What the lease still holds when it is destroyed goes
// back to the budget, and a wait still queued is cancelled (its callback does not run), so a
// call that ends on any path cannot leak budget.
//
// The calls' pattern: Acquire before reading or building more (a window of bytes), Take for a
// message that turned out larger than what was reserved for it, Release as bytes are written
// to the store or sent. Release runs the callbacks of the waiters it lets through on the
// calling thread: do not hold a lock that those callbacks take (a reactor releases after
// unlocking its own mutex).
//
// Thread safety: all methods are thread-safe (they take the budget's lock). Movable, not
// copyable; the budget must outlive the lease.
#ifndef TURBOKV_SERVER_SERVICE_BUDGET_LEASE_H_
#define TURBOKV_SERVER_SERVICE_BUDGET_LEASE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "server/service/byte_budget.h"

namespace turbokv::server {

class BudgetLease {
 public:
  BudgetLease() = default;  // belongs to no budget: holds nothing, every Acquire is granted
  // A lease of `tenant` (Principal::tenant; "" for a server without authentication).
  BudgetLease(ByteBudget* budget, std::string_view tenant);
  ~BudgetLease();
  BudgetLease(BudgetLease&& other) noexcept;
  BudgetLease& operator=(BudgetLease&& other) noexcept;
  BudgetLease(const BudgetLease&) = delete;
  BudgetLease& operator=(const BudgetLease&) = delete;

  // Takes `bytes` more. Returns true when they are held now; false when the lease waits, and
  // `done` then runs once, on another thread: OK (held), RESOURCE_EXHAUSTED after `timeout`
  // (naming the tenant's share or the server's limit, whichever stayed spent), UNAVAILABLE at
  // shutdown. One wait at a time: the caller must not Acquire while a wait is queued.
  [[nodiscard]] bool Acquire(uint64_t bytes, std::chrono::milliseconds timeout,
                             ByteBudget::Callback done);
  // Removes the queued wait; true when its callback will not run.
  bool Cancel();
  // Takes bytes without waiting (a message larger than the window reserved for it). Bounded by
  // the caller: at most one message per read.
  void Take(uint64_t bytes);
  // Gives back `bytes` (at most what is held).
  void Release(uint64_t bytes);
  void ReleaseAll();
  uint64_t held() const;

 private:
  ByteBudget* budget_ = nullptr;
  std::unique_ptr<ByteBudget::Account> account_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_BUDGET_LEASE_H_
