// A 32-lane warp emulator for the CUDA backend's per-warp code (kernels/src/warp_codec.h):
// each lane is a fiber (ucontext) running the same lane program; at every collective
// (ShflXor, Shfl, Sync) a lane parks until all 32 have arrived, then each gets its result
// exactly as __shfl_xor_sync / __shfl_sync define it. Lanes that reach different collectives, or
// finish while others wait, are reported as divergence (undefined behaviour on a device).
//
// Test-only; not thread-safe (one Run at a time per emulator).
#ifndef TURBOKV_TESTS_UNIT_WARP_EMULATOR_H_
#define TURBOKV_TESTS_UNIT_WARP_EMULATOR_H_

#include <ucontext.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/casts.h"

namespace turbokv::testing_util {

class WarpEmulator;

// The Warp type of warp_codec.h for emulated lanes.
class EmulatedWarp {
 public:
  EmulatedWarp(WarpEmulator* emu, int lane) : emu_(emu), lane_(lane) {}
  int lane() const { return lane_; }
  inline float ShflXor(float v, int mask) const;
  inline uint32_t ShflXor(uint32_t v, int mask) const;
  inline float Shfl(float v, int src_lane) const;
  inline void Sync() const;

 private:
  WarpEmulator* emu_;
  int lane_;
};

class WarpEmulator {
 public:
  static constexpr int kLanes = 32;
  enum class Op { kShflXor, kShfl, kSync };

  explicit WarpEmulator(size_t stack_bytes = 256 * 1024) : stack_bytes_(stack_bytes) {
    for (auto& s : stacks_) s = std::make_unique<char[]>(stack_bytes_);
  }
  WarpEmulator(const WarpEmulator&) = delete;
  WarpEmulator& operator=(const WarpEmulator&) = delete;

  // Runs `body` on 32 lanes. Returns "" on success, else what diverged.
  std::string Run(const std::function<void(const EmulatedWarp&)>& body) {
    body_ = &body;
    for (int l = 0; l < kLanes; ++l) {
      pending_[l] = Pending{};
      done_[l] = false;
      getcontext(&lanes_[l]);
      lanes_[l].uc_stack.ss_sp = stacks_[l].get();
      lanes_[l].uc_stack.ss_size = stack_bytes_;
      lanes_[l].uc_link = &scheduler_;
      const uintptr_t self = reinterpret_cast<uintptr_t>(this);
      makecontext(&lanes_[l], reinterpret_cast<void (*)()>(&Trampoline), 3,
                  static_cast<unsigned>(self >> 32), static_cast<unsigned>(self & 0xFFFFFFFFu), l);
    }
    for (;;) {
      for (int l = 0; l < kLanes; ++l) {
        if (!done_[l]) swapcontext(&scheduler_, &lanes_[l]);
      }
      int finished = 0;
      for (int l = 0; l < kLanes; ++l) finished += done_[l] ? 1 : 0;
      if (finished == kLanes) return "";
      if (finished != 0) return "some lanes finished while others wait at a collective";
      for (int l = 1; l < kLanes; ++l) {
        if (pending_[l].op != pending_[0].op) return "lanes reached different collectives";
      }
      ++collectives_;
      uint32_t result[kLanes];
      for (int l = 0; l < kLanes; ++l) {
        const Pending& p = pending_[l];
        switch (p.op) {
          case Op::kShflXor:
            if (p.arg < 0 || p.arg >= kLanes) return "shuffle xor mask out of range";
            result[l] = pending_[l ^ p.arg].value;
            break;
          case Op::kShfl:
            if (p.arg < 0 || p.arg >= kLanes) return "shuffle source lane out of range";
            result[l] = pending_[p.arg].value;
            break;
          case Op::kSync:
            result[l] = 0;
            break;
        }
      }
      for (int l = 0; l < kLanes; ++l) pending_[l].result = result[l];
    }
  }

  // Collectives executed by all Runs so far.
  uint64_t collectives() const { return collectives_; }

  uint32_t Collective(int lane, Op op, uint32_t value, int arg) {
    pending_[lane].op = op;
    pending_[lane].value = value;
    pending_[lane].arg = arg;
    swapcontext(&lanes_[lane], &scheduler_);
    return pending_[lane].result;
  }

 private:
  struct Pending {
    Op op = Op::kSync;
    uint32_t value = 0;
    int arg = 0;
    uint32_t result = 0;
  };

  static void Trampoline(unsigned hi, unsigned lo, int lane) {
    auto* self = reinterpret_cast<WarpEmulator*>((static_cast<uintptr_t>(hi) << 32) | lo);
    (*self->body_)(EmulatedWarp(self, lane));
    self->done_[lane] = true;
  }  // returns to uc_link: the scheduler

  size_t stack_bytes_;
  std::unique_ptr<char[]> stacks_[kLanes];
  ucontext_t scheduler_;
  ucontext_t lanes_[kLanes];
  Pending pending_[kLanes];
  bool done_[kLanes] = {};
  const std::function<void(const EmulatedWarp&)>* body_ = nullptr;
  uint64_t collectives_ = 0;
};

inline float EmulatedWarp::ShflXor(float v, int mask) const {
  return absl::bit_cast<float>(ShflXor(absl::bit_cast<uint32_t>(v), mask));
}
inline uint32_t EmulatedWarp::ShflXor(uint32_t v, int mask) const {
  return emu_->Collective(lane_, WarpEmulator::Op::kShflXor, v, mask);
}
inline float EmulatedWarp::Shfl(float v, int src_lane) const {
  return absl::bit_cast<float>(
      emu_->Collective(lane_, WarpEmulator::Op::kShfl, absl::bit_cast<uint32_t>(v), src_lane));
}
inline void EmulatedWarp::Sync() const { emu_->Collective(lane_, WarpEmulator::Op::kSync, 0, 0); }

}  // namespace turbokv::testing_util

#endif  // TURBOKV_TESTS_UNIT_WARP_EMULATOR_H_
