// GetBlocksResponse messages put on the wire without copying their `data`.
//
// The small fields are serialized by protobuf; `data` (field 8, which protobuf always writes
// last) goes out as one gRPC slice pointing into a buffer the slice keeps alive (a shared
// owner), so a decoded block or a stored value reaches the socket with no copy in between.
// The bytes are exactly protobuf's serialization of the whole message, so any client parses
// them as a GetBlocksResponse.
#ifndef TURBOKV_SERVER_SERVICE_WIRE_RESPONSE_H_
#define TURBOKV_SERVER_SERVICE_WIRE_RESPONSE_H_

#include <cstddef>
#include <memory>

#include "grpcpp/support/byte_buffer.h"
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

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_WIRE_RESPONSE_H_
