// The two messages of the request path that are read or written around gRPC's byte buffers
// instead of through protobuf objects (with protobuf's own coded-stream primitives).
//
// GetBlocksResponse, put on the wire without copying its `data`:
// The small fields are serialized by protobuf; `data` (field 8, which protobuf always writes
// last) goes out as one gRPC slice pointing into a buffer the slice keeps alive (a shared
// owner), so a decoded block or a stored value reaches the socket with no copy in between.
// The bytes are exactly protobuf's serialization of the whole message, so any client parses
// them as a GetBlocksResponse.
#ifndef TURBOKV_SERVER_SERVICE_WIRE_FORMAT_H_
#define TURBOKV_SERVER_SERVICE_WIRE_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/support/byte_buffer.h"
#include "server/storage/eviction_policy.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::server {

// `size` bytes at `data`, valid while `owner` (or a copy of it) lives.
struct Payload {
  std::shared_ptr<const void> owner;
  const char* data = nullptr;
  size_t size = 0;
};

// `fields` (whose own `data` must be empty) followed by `payload` as its `data` field. The
// returned buffer holds a reference to payload.owner until gRPC has sent it.
[[nodiscard]] grpc::ByteBuffer SerializeGetBlocksResponse(const v1::GetBlocksResponse& fields,
                                                          const Payload& payload);

// LookupRequest, read without a message: a chain of 1,000 hashes is 1,000 string allocations
// as a protobuf object, and views into the request's bytes here.
struct LookupRequestView {
  uint64_t namespace_id = 0;
  std::vector<std::string_view> block_hashes;  // views into the parsed bytes, in order
  uint32_t lease_seconds = 0;
  std::optional<PolicyTuning> follow_tuning;  // set when the request has one
};

// Parses `bytes` (a serialized LookupRequest, which must outlive *out) into *out, with
// protobuf's semantics: it parses exactly when ParseFromString would (unknown fields of any
// wire type skipped, the last of a repeated scalar wins).
// INVALID_ARGUMENT when it is not a well-formed message.
[[nodiscard]] absl::Status ParseLookupRequest(std::string_view bytes, LookupRequestView* out);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_WIRE_FORMAT_H_
