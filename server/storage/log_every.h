// At most one log line per interval for events that can come per block (a flood of refused
// puts or damaged blocks), counting the ones it did not log. Internal to server/storage.
//
// Thread safety: thread-safe (atomics).
#ifndef TURBOKV_SERVER_STORAGE_LOG_EVERY_H_
#define TURBOKV_SERVER_STORAGE_LOG_EVERY_H_

#include <atomic>
#include <cstdint>

namespace turbokv::server {

class LogEvery {
 public:
  // Counts one event; true when a line is due (at most one per kIntervalSeconds).
  bool Due(int64_t now) {
    ++count_;
    int64_t last = last_.load();
    return now - last >= kIntervalSeconds && last_.compare_exchange_strong(last, now);
  }
  void Add(uint64_t n) { count_ += n; }
  // Events counted since the last call (the line that is due reports them).
  uint64_t TakeCount() { return count_.exchange(0); }

 private:
  static constexpr int64_t kIntervalSeconds = 10;
  std::atomic<int64_t> last_{0};
  std::atomic<uint64_t> count_{0};
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_LOG_EVERY_H_
