#include "server/service/service_context.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace turbokv::server {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

grpc::Status RpcScope::Complete(const absl::Status& status) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  ctx_->metrics->RecordRpc(method_, status.code(), seconds);
  if (!status.ok()) {
    // Client mistakes are expected traffic; server-side failures are errors.
    const bool server_fault = status.code() == absl::StatusCode::kInternal ||
                              status.code() == absl::StatusCode::kDataLoss ||
                              status.code() == absl::StatusCode::kUnknown;
    spdlog::log(server_fault ? spdlog::level::err : spdlog::level::warn, "{} {}: {} ({:.3f} s)",
                RpcMethodName(method_), StatusCodeName(status.code()),
                std::string(status.message()), seconds);
  }
  return ToGrpcStatus(status);
}

absl::Status ShuttingDown() { return absl::UnavailableError("turbokv-server is shutting down"); }

absl::Status CaughtException(ServiceContext* ctx, const char* where, std::exception_ptr e) {
  std::string what = "an exception that is not a std::exception";
  try {
    std::rethrow_exception(std::move(e));
  } catch (const std::exception& ex) {
    what = ex.what();
  } catch (...) {
  }
  if (ctx != nullptr && ctx->metrics != nullptr) ctx->metrics->RecordInternalFailure();
  spdlog::error("turbokv-server bug: {} threw: {}", where, what);
  return absl::InternalError(absl::StrCat("turbokv-server bug: ", where, " threw: ", what));
}

absl::StatusOr<Principal> Authenticate(ServiceContext& ctx, const grpc::ServerContextBase& context,
                                       RpcMethod method) {
  if (ctx.auth == nullptr) return Principal{"", true};
  return ctx.auth->Authenticate(context, RpcMethodName(method));
}

absl::Status CheckHashCount(const ServiceContext& ctx, size_t count) {
  if (count <= ctx.limits.max_hashes_per_call) return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat(count, " block hashes in one call; at most ", ctx.limits.max_hashes_per_call,
                   " are allowed (--max-hashes-per-call): split the call"));
}

std::optional<std::chrono::steady_clock::time_point> DefaultDeadline(
    const ServiceContext& ctx, const grpc::ServerContextBase& context) {
  if (ctx.limits.default_deadline_ms <= 0) return std::nullopt;
  // gRPC reports "no deadline" as the largest time point; anything past a year counts as none.
  const auto deadline = context.deadline();
  if (deadline < std::chrono::system_clock::now() + std::chrono::hours(24 * 365)) {
    return std::nullopt;
  }
  return std::chrono::steady_clock::now() +
         std::chrono::milliseconds(ctx.limits.default_deadline_ms);
}

}  // namespace turbokv::server
