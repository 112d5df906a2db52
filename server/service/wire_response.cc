#include "server/service/wire_response.h"

#include <string>

#include "grpcpp/support/slice.h"

namespace turbokv::server {
namespace {

void ReleaseOwner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }

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

}  // namespace turbokv::server
