// The protobuf wire format of the two payload-carrying messages, read and written around
// gRPC's slices instead of through message objects. Internal to turbokv::client.
//
// PutBlocks chunks are written as byte buffers whose payload is copied once, from the caller's
// block into the outgoing slice (a message would copy it twice: into its field, then into the
// serialized buffer).
//
// The client reads GetBlocks as raw byte buffers and reads the fields with protobuf's own
// CodedInputStream over the received slices, so a chunk's `data` is never copied into a
// message first: it stays a list of views into the received slices, and BlockAssembler
// appends them to the block (one copy from the socket's buffers to the block the caller gets).
// Any input parses exactly when protobuf's ParseFromString would (unknown fields skipped).
#ifndef TURBOKV_CLIENT_SRC_WIRE_FORMAT_H_
#define TURBOKV_CLIENT_SRC_WIRE_FORMAT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "google/protobuf/message_lite.h"
#include "grpcpp/support/byte_buffer.h"
#include "turbokv/client/client.h"

namespace turbokv::client::internal {

// The fields of one GetBlocksResponse (turbokv.proto); `data` views the parsed buffers.
struct WireChunk {
  uint32_t index = 0;
  bool found = false;
  int encoding = 0;
  int dtype = 0;
  uint64_t block_bytes = 0;
  uint64_t offset = 0;
  std::vector<absl::string_view> data;  // the pieces of `data`, in order
  uint64_t data_size = 0;               // their total bytes
};

// Parses the concatenation of `pieces` as a GetBlocksResponse into *out (cleared first).
// DataLoss when the bytes are not a well-formed message.
[[nodiscard]] absl::Status ParseGetBlocksResponse(absl::Span<const absl::string_view> pieces,
                                                  WireChunk* out);

// `fields` serialized (its own bytes field `data_field` must be empty and be the message's
// highest field number, so that protobuf would write it last), followed by `data` as that
// field: exactly the serialization of the message with `data` set.
[[nodiscard]] grpc::ByteBuffer SerializeWithData(const google::protobuf::MessageLite& fields,
                                                 int data_field, absl::string_view data);

// A serialized LookupRequest (turbokv.proto) of the chain `hashes`, written in one buffer with
// no per-hash allocation; the same bytes as protobuf's.
[[nodiscard]] grpc::ByteBuffer SerializeLookupRequest(
    uint64_t namespace_id, absl::Span<const std::string> hashes, uint32_t lease_seconds,
    const std::optional<PolicyTuning>& follow_tuning = std::nullopt);

}  // namespace turbokv::client::internal

#endif  // TURBOKV_CLIENT_SRC_WIRE_FORMAT_H_
