#include "server/service/wire_format.h"

#include <string>

#include "grpcpp/support/slice.h"

namespace turbokv::server {
namespace {

void ReleaseOwner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }

bool ReadVarint(std::string_view* in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const auto b = static_cast<uint8_t>(in->front());
    in->remove_prefix(1);
    *v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

absl::Status NotALookupRequest(const char* what) {
  return absl::InvalidArgumentError(std::string("the request is not a LookupRequest: ") + what);
}

}  // namespace

grpc::ByteBuffer SerializeGetBlocksResponse(const v1::GetBlocksResponse& fields,
                                            const Payload& payload) {
  std::string head;
  fields.SerializeToString(&head);
  if (payload.size == 0) {  // proto3 leaves an empty bytes field off the wire
    grpc::Slice only(head);
    return grpc::ByteBuffer(&only, 1);
  }
  // Field 8, wire type 2 (length-delimited), then the length as a varint.
  head.push_back(static_cast<char>((8 << 3) | 2));
  for (uint64_t n = payload.size;; n >>= 7) {
    if (n < 0x80) {
      head.push_back(static_cast<char>(n));
      break;
    }
    head.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  grpc::Slice slices[2] = {
      grpc::Slice(head),
      grpc::Slice(const_cast<char*>(payload.data), payload.size, &ReleaseOwner,
                  new std::shared_ptr<const void>(payload.owner))};
  return grpc::ByteBuffer(slices, 2);
}

absl::Status ParseLookupRequest(std::string_view bytes, LookupRequestView* out) {
  *out = LookupRequestView{};
  std::string_view in = bytes;
  while (!in.empty()) {
    uint64_t tag = 0, v = 0;
    if (!ReadVarint(&in, &tag)) return NotALookupRequest("truncated tag");
    const uint64_t field = tag >> 3;
    if (field == 0) return NotALookupRequest("field number 0");
    switch (tag & 7) {
      case 0:
        if (!ReadVarint(&in, &v)) return NotALookupRequest("truncated varint");
        if (field == 3) out->lease_seconds = static_cast<uint32_t>(v);
        break;
      case 1:
        if (in.size() < 8) return NotALookupRequest("truncated fixed64");
        if (field == 1) {
          v = 0;
          for (int b = 7; b >= 0; --b) v = (v << 8) | static_cast<uint8_t>(in[b]);
          out->namespace_id = v;
        }
        in.remove_prefix(8);
        break;
      case 2:
        if (!ReadVarint(&in, &v) || v > in.size()) return NotALookupRequest("truncated bytes");
        if (field == 2) out->block_hashes.push_back(in.substr(0, v));
        in.remove_prefix(v);
        break;
      case 5:
        if (in.size() < 4) return NotALookupRequest("truncated fixed32");
        in.remove_prefix(4);
        break;
      default:
        return NotALookupRequest("unsupported wire type");
    }
  }
  return absl::OkStatus();
}

}  // namespace turbokv::server
