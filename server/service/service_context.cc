#include "server/service/service_context.h"

#include <string>

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

}  // namespace turbokv::server
