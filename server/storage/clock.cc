#include "server/storage/clock.h"

#include <chrono>

namespace turbokv::server {
namespace {

class WallClock final : public Clock {
 public:
  int64_t NowSeconds() const override {
    return std::chrono::duration_cast<std::chrono::seconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace

const Clock* SystemClock() {
  static const WallClock* const clock = new WallClock();
  return clock;
}

}  // namespace turbokv::server
