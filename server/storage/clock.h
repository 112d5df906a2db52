// Time source of the store (TTL, leases, access times), a seam so tests can move time.
#ifndef TURBOKV_SERVER_STORAGE_CLOCK_H_
#define TURBOKV_SERVER_STORAGE_CLOCK_H_

#include <cstdint>

namespace turbokv::server {

class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since the Unix epoch. Thread-safe.
  virtual int64_t NowSeconds() const = 0;
};

// The wall clock. Never null; lives forever.
const Clock* SystemClock();

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_CLOCK_H_
