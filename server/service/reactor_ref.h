// Shared ownership of a streaming reactor (PutBlocks, GetBlocks) between gRPC and the work the
// reactor hands out.
//
// gRPC calls OnDone once the call is over, and the reactor must not be used after that; but
// its pipeline's codec and I/O pool tasks and its in-flight budget callback hold the reactor
// (which owns the pipeline) and still run code after their last locked step (the unlocked tail
// of PutPipeline::Settle / GetPipeline::Pump: giving budget back, starting the next read or
// write), racing the thread that finishes the call. So the reactor counts its owners: one
// reference for gRPC, dropped by OnDone, and one per pending task or callback (a ReactorRef, or
// the token of the pipeline Host's Pin(), captured in it and dropped when the pool or the
// budget destroys the callable). The last one deletes the reactor.
//
// Thread safety: references are taken and dropped from any thread. A reference is only ever
// copied from one that is alive, so the count never climbs back from zero.
//
// ThreadSanitizer: gRPC runs a reactor's reactions (OnReadDone, OnWriteDone, OnCancel, OnDone)
// on its own threads, the callback queue's or (OnCancel) its default executor's, and orders
// them, after the constructor, after the operation that led to them and (OnDone) after every
// other reaction, through its own atomics and futexes inside Debian's uninstrumented libgrpc,
// which TSan cannot see. Two races were reported for want of it (tools/tsan.sh's
// many-clients-cancelling lifetime test, about one run in eight): OnCancel on a default-executor
// thread locking the mutex that the constructor had initialised on another thread, and a pool
// task's last ReactorRef deleting a reactor that an OnCancel, over before OnDone, had read.
// Each reactor of the service (also the refused-stream one) states that ordering for TSan:
// HandedToGrpc() as its constructor's last step and before each StartRead, StartWrite and
// Finish; a ReactionScope over each reaction but OnDone; InReaction() as OnDone's first step.
// None of it is code outside a TSan build.
#ifndef TURBOKV_SERVER_SERVICE_REACTOR_REF_H_
#define TURBOKV_SERVER_SERVICE_REACTOR_REF_H_

#include <atomic>
#include <memory>
#include <utility>

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

namespace turbokv::server {

// The constructor's last step, and before each operation the reactor starts: what the thread
// did so far happens before the reactions of `reactor`.
inline void HandedToGrpc(const void* reactor) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<void*>(reactor));
#else
  (void)reactor;
#endif
}
// OnDone's first step: everything handed to gRPC and every other reaction happen before it.
inline void InReaction(const void* reactor) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<void*>(reactor));
#else
  (void)reactor;
#endif
}
// A reaction other than OnDone: InReaction() at its start, HandedToGrpc() at its end (gRPC
// runs OnDone after it has returned).
class ReactionScope {
 public:
  explicit ReactionScope(const void* reactor) : reactor_(reactor) { InReaction(reactor_); }
  ~ReactionScope() { HandedToGrpc(reactor_); }
  ReactionScope(const ReactionScope&) = delete;
  ReactionScope& operator=(const ReactionScope&) = delete;

 private:
  const void* reactor_;
};

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
  // A reference as a type-erased handle (the pipelines' Host::Pin): the reactor lives until the
  // handle and its copies are gone.
  std::shared_ptr<void> PinSelf() {
    AddRef();
    return std::shared_ptr<void>(static_cast<void*>(this),
                                 [](void* p) { static_cast<RefCountedReactor*>(p)->Unref(); });
  }

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
