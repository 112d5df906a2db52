// The server-wide budget of request bytes in flight (docs/server.md, "Limits"): put chunks
// received and not yet written, get responses built and not yet sent. A call takes bytes
// before it reads or builds more; when the budget is spent it waits (backpressure: a put
// stream simply stops reading, so HTTP/2 flow control slows its client), and after
// `timeout` it gets RESOURCE_EXHAUSTED naming the limit.
//
// Waiters are served in arrival order (a new call does not overtake a waiting one). When
// nothing is in use, one request of any size is granted, so a block larger than the whole
// budget still goes through alone.
//
// Thread safety: all methods are thread-safe. Callbacks run without the budget's lock, on the
// thread that released bytes or on the budget's timer thread.
#ifndef TURBOKV_SERVER_SERVICE_BYTE_BUDGET_H_
#define TURBOKV_SERVER_SERVICE_BYTE_BUDGET_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <mutex>
#include <thread>

#include "absl/status/status.h"

namespace turbokv::server {

class ByteBudget {
 public:
  // Gets OkStatus once the bytes are taken for the caller, or RESOURCE_EXHAUSTED (timed out) /
  // UNAVAILABLE (shutdown). Runs exactly once unless Cancel() returned true.
  using Callback = std::function<void(const absl::Status&)>;
  using Ticket = uint64_t;  // 0 = none

  explicit ByteBudget(uint64_t limit_bytes);
  ~ByteBudget();  // Shutdown(), then joins the timer thread
  ByteBudget(const ByteBudget&) = delete;
  ByteBudget& operator=(const ByteBudget&) = delete;

  // Takes `bytes` now and returns 0 when they fit (or nothing is in use) and nobody waits.
  // Otherwise queues `done` and returns its ticket. Never runs `done` on the calling thread,
  // so the caller may hold its own lock (which `done` may take).
  Ticket Acquire(uint64_t bytes, std::chrono::milliseconds timeout, Callback done);
  // Removes a waiter; true when its callback will not run (it was still waiting).
  bool Cancel(Ticket ticket);
  void Release(uint64_t bytes);
  // Takes bytes unconditionally (a message that turned out larger than what was reserved for
  // it). Bounded by the caller: at most one message per reader over the limit.
  void Take(uint64_t bytes);
  // Fails every waiter with UNAVAILABLE and every later Acquire that would wait.
  void Shutdown();

  uint64_t limit() const { return limit_; }
  uint64_t in_use() const;
  uint64_t rejected() const;  // waits that timed out, since start

 private:
  struct Waiter {
    Ticket ticket;
    uint64_t bytes;
    std::chrono::steady_clock::time_point deadline;
    Callback done;
  };
  bool FitsLocked(uint64_t bytes) const { return in_use_ == 0 || in_use_ + bytes <= limit_; }
  // Grants waiters at the head that fit; their callbacks go to `ready`. Requires mu_.
  void GrantLocked(std::list<Callback>* ready);
  void TimerLoop();

  const uint64_t limit_;
  mutable std::mutex mu_;
  std::condition_variable timer_cv_;
  uint64_t in_use_ = 0;
  uint64_t rejected_ = 0;
  Ticket next_ticket_ = 0;
  std::list<Waiter> waiters_;  // arrival order
  bool stop_ = false;
  std::thread timer_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_BYTE_BUDGET_H_
