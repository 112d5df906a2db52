// A streaming call's entry in the CallWatchdog (idle timeout, the server's default deadline)
// and its TryCancel, ordered against OnDone: after Done() nothing is armed and the call's
// context (gone once OnDone returns) is not touched. The one teardown step that both streaming
// reactors share (put_blocks_reactor.h, get_blocks_reactor.h).
//
// Thread safety: all methods are thread-safe. Arm may be called under the reactor's lock (it
// takes this object's lock, then the watchdog's); Fired, TryCancel and Done must not be (Done
// destroys the entry's callable, which may own the reactor).
#ifndef TURBOKV_SERVER_SERVICE_CALL_WATCH_H_
#define TURBOKV_SERVER_SERVICE_CALL_WATCH_H_

#include <functional>
#include <mutex>

#include "grpcpp/grpcpp.h"
#include "server/service/call_watchdog.h"

namespace turbokv::server {

class CallWatch {
 public:
  // Both must outlive this object's use (the watchdog the server, the context OnDone).
  CallWatch(CallWatchdog* watchdog, grpc::CallbackServerContext* context)
      : watchdog_(watchdog), context_(context) {}
  CallWatch(const CallWatch&) = delete;
  CallWatch& operator=(const CallWatch&) = delete;

  // Arms the call's entry for `when` (one at a time: call again only after it fired), unless
  // Done() ran. `fire` runs on the watchdog's thread.
  void Arm(CallWatchdog::Clock::time_point when, std::function<void()> fire);
  // The entry fired (first step of `fire`): false once Done() ran, and then nothing is to be
  // done.
  bool Fired();
  // Cancels the call (its pending operation ends with ok = false, OnCancel runs) unless Done()
  // ran.
  void TryCancel();
  // OnDone's step: disarms the entry (its callable destroyed here, outside any lock).
  void Done();

 private:
  CallWatchdog* const watchdog_;
  grpc::CallbackServerContext* const context_;
  std::mutex mu_;
  CallWatchdog::Handle handle_ = 0;  // 0: none armed
  bool done_ = false;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_CALL_WATCH_H_
