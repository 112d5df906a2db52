// Conversions between the client's absl-typed structs and the turbokv.v1 protobuf messages,
// and between grpc::Status and absl::Status (the one place the client crosses that edge).
#ifndef TURBOKV_CLIENT_SRC_CONVERT_H_
#define TURBOKV_CLIENT_SRC_CONVERT_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"
#include "turbokv/client/client.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::client::internal {

// Absl and gRPC status codes are the same numbers, so the mapping is a cast.
absl::Status FromGrpc(const grpc::Status& status);

void ToProto(const NamespaceDescriptor& in, turbokv::v1::NamespaceDescriptor* out);
NamespaceDescriptor FromProto(const turbokv::v1::NamespaceDescriptor& in);
ServerStats FromProto(const turbokv::v1::StatsResponse& in);

}  // namespace turbokv::client::internal

#endif  // TURBOKV_CLIENT_SRC_CONVERT_H_
