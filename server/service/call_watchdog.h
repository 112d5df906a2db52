// Timers for calls that gRPC itself would let run for ever: a put stream whose client stops
// sending (the idle timeout) and a call whose client set no deadline (the server's default
// deadline). A call arms an entry with the time it next needs looking at and a callable; the
// watchdog's one thread runs the callable once that time has passed, unless the entry was
// disarmed first. The callable decides (it may cancel the call, or arm a new entry).
//
// Its own thread, not a task on the server's PeriodicTasks (common/periodic_tasks.h): this is a
// deadline queue (one entry per call, due to the millisecond), not periodic work, and a call's
// cancellation must not wait behind a store maintenance pass (docs/architecture.md).
//
// Thread safety: all methods are thread-safe. Callables run on the watchdog's thread without
// its lock, so they may Arm again; Arm and Disarm may be called under the caller's own lock.
#ifndef TURBOKV_SERVER_SERVICE_CALL_WATCHDOG_H_
#define TURBOKV_SERVER_SERVICE_CALL_WATCHDOG_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

namespace turbokv::server {

class CallWatchdog {
 public:
  using Handle = uint64_t;  // 0 = none
  using Clock = std::chrono::steady_clock;

  CallWatchdog();
  ~CallWatchdog();  // joins the thread; entries still armed are dropped without running
  CallWatchdog(const CallWatchdog&) = delete;
  CallWatchdog& operator=(const CallWatchdog&) = delete;

  // Runs `fire` once `when` has passed, on the watchdog's thread.
  Handle Arm(Clock::time_point when, std::function<void()> fire);
  // Removes an entry that has not fired. Returns its callable (empty when it fired or was
  // disarmed already) for the caller to destroy outside its own locks: a callable may own its
  // caller.
  std::function<void()> Disarm(Handle handle);
  size_t armed() const;

 private:
  void Loop();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Handle next_ = 0;
  std::map<std::pair<Clock::time_point, Handle>, std::function<void()>> entries_;
  std::map<Handle, Clock::time_point> when_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_CALL_WATCHDOG_H_
