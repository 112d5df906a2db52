// What every handler needs, and the one helper that reports an RPC (timing, metrics by
// method and code, one log line per error, absl -> grpc status).
#ifndef TURBOKV_SERVER_SERVICE_SERVICE_CONTEXT_H_
#define TURBOKV_SERVER_SERVICE_SERVICE_CONTEXT_H_

#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"
#include "server/auth/authenticator.h"
#include "server/metrics/metrics.h"
#include "server/server_options.h"
#include "server/service/budget_lease.h"
#include "server/service/byte_budget.h"
#include "server/service/call_watchdog.h"
#include "server/service/codec_backend.h"
#include "server/service/codec_pool.h"
#include "server/service/namespace_registry.h"
#include "server/storage/block_store.h"

namespace turbokv::server {

// Shared by all handlers; owned by Server, outlives every call.
struct ServiceContext {
  BlockStore* store = nullptr;
  NamespaceRegistry* registry = nullptr;
  CodecPool* pool = nullptr;         // codec work (encode, decode, verify)
  CodecPool* io_pool = nullptr;      // RocksDB reads and writes, unary calls
  ByteBudget* budget = nullptr;      // server-wide request bytes in flight
  CallWatchdog* watchdog = nullptr;  // idle streams, calls without a deadline
  Metrics* metrics = nullptr;
  Authenticator* auth = nullptr;  // nullptr: every caller is the admin of tenant ""
  CodecBackend backend;
  LimitOptions limits;
  std::atomic<bool> shutting_down{false};
};

// absl codes equal gRPC codes, so the mapping is a cast.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Times one RPC from construction; Complete() reports it exactly once.
class RpcScope {
 public:
  RpcScope(ServiceContext* ctx, RpcMethod method)
      : ctx_(ctx), method_(method), start_(std::chrono::steady_clock::now()) {}
  // Records metrics, logs non-OK statuses (one line), returns the gRPC status to Finish with.
  grpc::Status Complete(const absl::Status& status);
  RpcMethod method() const { return method_; }

 private:
  ServiceContext* ctx_;
  RpcMethod method_;
  std::chrono::steady_clock::time_point start_;
};

// UNAVAILABLE used once shutdown has begun.
absl::Status ShuttingDown();

// The exception barrier of reactor callbacks: INTERNAL (logged, counted) for an exception
// that escaped `where` of `method`; nothing else throws in turbokv, so this is a bug report.
absl::Status CaughtException(ServiceContext* ctx, const char* where, std::exception_ptr e);

// Runs fn() (returning absl::Status) inside the exception barrier.
template <typename Fn>
absl::Status Guarded(ServiceContext* ctx, const char* where, Fn&& fn) {
  try {
    return fn();
  } catch (...) {
    return CaughtException(ctx, where, std::current_exception());
  }
}

// The caller of `context` (ctx.auth), or why it is refused (UNAUTHENTICATED,
// PERMISSION_DENIED).
absl::StatusOr<Principal> Authenticate(ServiceContext& ctx, const grpc::ServerContextBase& context,
                                       RpcMethod method);

// The server's deadline for a call whose client set none (now + limits.default_deadline_ms);
// nullopt when the client set one or the default is 0 (none).
std::optional<std::chrono::steady_clock::time_point> DefaultDeadline(
    const ServiceContext& ctx, const grpc::ServerContextBase& context);

// RESOURCE_EXHAUSTED when a call names more than limits.max_hashes_per_call hashes.
absl::Status CheckHashCount(const ServiceContext& ctx, size_t count);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_SERVICE_CONTEXT_H_
