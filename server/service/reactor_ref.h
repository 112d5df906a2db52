// Shared ownership of a streaming reactor (PutBlocks, GetBlocks) between gRPC and the work the
// reactor hands out.
//
// gRPC calls OnDone once the call is over, and the reactor must not be used after that; but
// its codec and I/O pool tasks and its in-flight budget callback hold the reactor's pointer
// and still run code of the reactor after their last locked step (the unlocked tail of
// Settle/Pump: releasing budget, starting the next read or write), racing the thread that
// finishes the call. So the reactor counts its owners: one reference for gRPC, dropped by
// OnDone, and one per pending task or callback (a ReactorRef captured in it, dropped when the
// pool or the budget destroys the callable). The last one deletes the reactor.
//
// Thread safety: references are taken and dropped from any thread. A reference is only ever
// copied from one that is alive, so the count never climbs back from zero.
#ifndef TURBOKV_SERVER_SERVICE_REACTOR_REF_H_
#define TURBOKV_SERVER_SERVICE_REACTOR_REF_H_

#include <atomic>
#include <utility>

namespace turbokv::server {

class RefCountedReactor {
 public:
  RefCountedReactor() = default;
  RefCountedReactor(const RefCountedReactor&) = delete;
  RefCountedReactor& operator=(const RefCountedReactor&) = delete;

  void AddRef() { refs_.fetch_add(1, std::memory_order_relaxed); }
  void Unref() {
    if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

 protected:
  virtual ~RefCountedReactor() = default;
  // OnDone: gRPC is finished with the reactor.
  void ReleaseGrpcRef() { Unref(); }

 private:
  std::atomic<int> refs_{1};  // gRPC's until OnDone, plus one per ReactorRef
};

// A copyable owning pointer to a reactor, for the callables it hands to pools and the budget
// (std::function needs copyable captures).
template <typename T>
class ReactorRef {
 public:
  explicit ReactorRef(T* reactor) : reactor_(reactor) { reactor_->AddRef(); }
  ReactorRef(const ReactorRef& other) : reactor_(other.reactor_) {
    if (reactor_ != nullptr) reactor_->AddRef();
  }
  ReactorRef(ReactorRef&& other) noexcept : reactor_(std::exchange(other.reactor_, nullptr)) {}
  ReactorRef& operator=(ReactorRef other) noexcept {
    std::swap(reactor_, other.reactor_);
    return *this;
  }
  ~ReactorRef() {
    if (reactor_ != nullptr) reactor_->Unref();
  }

  T* operator->() const { return reactor_; }

 private:
  T* reactor_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_REACTOR_REF_H_
