// One call's share of the in-flight budget (byte_budget.h): the bytes it holds, under its
// tenant, and at most one wait for more; and BudgetShare, a counted part of those bytes that
// the thing it pays for (a put block, a get message) owns.
//
// The calls' pattern: Acquire a window of bytes before reading or building more and turn what
// was granted into a BudgetShare (Granted); Split a block's or message's part off the window
// (or Take a share for a message larger than the window); the share goes back to the budget
// when its owner drops it: a block once committed or refused, a message once written. So a
// call that ends on any path cannot leak budget: whatever still holds bytes gives them back
// when it is destroyed, and the lease's account closes with the last share (a queued wait is
// cancelled then, its callback not run).
//
// Giving bytes back runs the callbacks of the waiters it lets through on the calling thread,
// also this lease's own: do not drop a share (or call Release) while holding a lock that those
// callbacks take. The reactors collect the shares to drop under their lock and drop them after
// unlocking (ShareBin).
//
// Thread safety: all methods are thread-safe for distinct objects (they take the budget's
// lock); one lease or share is used by one thread at a time. Movable, not copyable; the budget
// must outlive the lease and every share.
#ifndef TURBOKV_SERVER_SERVICE_BUDGET_LEASE_H_
#define TURBOKV_SERVER_SERVICE_BUDGET_LEASE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "server/service/byte_budget.h"

namespace turbokv::server {

class BudgetShare;

class BudgetLease {
 public:
  BudgetLease() = default;  // belongs to no budget: holds nothing, every Acquire is granted
  // A lease of `tenant` (Principal::tenant; "" for a server without authentication).
  BudgetLease(ByteBudget* budget, std::string_view tenant);
  ~BudgetLease() = default;
  BudgetLease(BudgetLease&& other) noexcept = default;
  BudgetLease& operator=(BudgetLease&& other) noexcept = default;
  BudgetLease(const BudgetLease&) = delete;
  BudgetLease& operator=(const BudgetLease&) = delete;

  // Takes `bytes` more. Returns true when they are held now; false when the lease waits, and
  // `done` then runs once, on another thread: OK (held), RESOURCE_EXHAUSTED after `timeout`
  // (naming the tenant's share or the server's limit, whichever stayed spent), UNAVAILABLE at
  // shutdown. One wait at a time: the caller must not Acquire while a wait is queued. Bytes
  // held this way belong to nobody until Granted() wraps them in a share.
  [[nodiscard]] bool Acquire(uint64_t bytes, std::chrono::milliseconds timeout,
                             ByteBudget::Callback done);
  // The share of `bytes` that an Acquire granted (at once, or through its callback with OK).
  [[nodiscard]] BudgetShare Granted(uint64_t bytes);
  // Removes the queued wait; true when its callback will not run.
  bool Cancel();
  // Takes bytes without waiting (a message larger than the window reserved for it). Bounded by
  // the caller: at most one message per read.
  [[nodiscard]] BudgetShare Take(uint64_t bytes);
  // Gives back `bytes` held outside any share (at most that many).
  void Release(uint64_t bytes);
  uint64_t held() const;  // in shares and outside them

 private:
  friend class BudgetShare;
  // The budget's account, closed when the lease and its last share are gone.
  struct Holder {
    Holder(ByteBudget* b, std::string_view tenant) : budget(b), account(b->Open(tenant)) {}
    ~Holder() { budget->Close(std::move(account)); }
    Holder(const Holder&) = delete;
    Holder& operator=(const Holder&) = delete;
    void Release(uint64_t bytes) { budget->Release(account.get(), bytes); }
    ByteBudget* budget;
    std::unique_ptr<ByteBudget::Account> account;
  };
  std::shared_ptr<Holder> holder_;  // null: no budget
};

// `bytes()` bytes held by a lease's account, given back when the share is destroyed or Reset.
// Default-constructed: empty. Keeps the lease's account open while it holds any.
class BudgetShare {
 public:
  BudgetShare() = default;
  ~BudgetShare() { Reset(); }
  BudgetShare(BudgetShare&& other) noexcept;
  BudgetShare& operator=(BudgetShare&& other) noexcept;
  BudgetShare(const BudgetShare&) = delete;
  BudgetShare& operator=(const BudgetShare&) = delete;

  uint64_t bytes() const { return bytes_; }
  // Moves min(bytes, this->bytes()) of this share into a new one.
  [[nodiscard]] BudgetShare Split(uint64_t bytes);
  // Moves all of `other` (of the same lease, or empty) into this share.
  void Absorb(BudgetShare other);
  void Reset();  // gives the bytes back now

 private:
  friend class BudgetLease;
  BudgetShare(std::shared_ptr<BudgetLease::Holder> holder, uint64_t bytes)
      : holder_(std::move(holder)), bytes_(bytes) {}
  std::shared_ptr<BudgetLease::Holder> holder_;
  uint64_t bytes_ = 0;
};

// Shares to give back once the caller has dropped its lock (see above): collected under the
// lock, given back when the bin is destroyed. Declare it before the lock guard.
using ShareBin = std::vector<BudgetShare>;

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_BUDGET_LEASE_H_
