#include "server/service/wire_format.h"

#include <climits>
#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "grpcpp/support/slice.h"

namespace turbokv::server {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;

// The tags this file reads or writes (field number and wire type, as turbokv.proto has them).
constexpr uint32_t kLookupNamespaceIdTag = WireFormatLite::MakeTag(
    v1::LookupRequest::kNamespaceIdFieldNumber, WireFormatLite::WIRETYPE_FIXED64);
constexpr uint32_t kLookupBlockHashesTag = WireFormatLite::MakeTag(
    v1::LookupRequest::kBlockHashesFieldNumber, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kLookupLeaseSecondsTag = WireFormatLite::MakeTag(
    v1::LookupRequest::kLeaseSecondsFieldNumber, WireFormatLite::WIRETYPE_VARINT);
constexpr uint32_t kLookupFollowTuningTag = WireFormatLite::MakeTag(
    v1::LookupRequest::kFollowTuningFieldNumber, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
constexpr uint32_t kGetBlocksDataTag = WireFormatLite::MakeTag(
    v1::GetBlocksResponse::kDataFieldNumber, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);

void ReleaseOwner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }

absl::Status NotALookupRequest(const char* what) {
  return absl::InvalidArgumentError(std::string("the request is not a LookupRequest: ") + what);
}

}  // namespace

grpc::ByteBuffer SerializeGetBlocksResponse(const v1::GetBlocksResponse& fields,
                                            const Payload& payload) {
  const size_t fields_size = fields.ByteSizeLong();
  if (payload.size == 0) {  // proto3 leaves an empty bytes field off the wire
    grpc::Slice only(fields_size);
    fields.SerializeWithCachedSizesToArray(const_cast<uint8_t*>(only.begin()));
    return grpc::ByteBuffer(&only, 1);
  }
  // The small fields, then the tag and length of `data` (field 8, which protobuf writes last):
  // one slice; the payload follows as its own slice, not copied.
  grpc::Slice head(fields_size + CodedOutputStream::VarintSize32(kGetBlocksDataTag) +
                   CodedOutputStream::VarintSize64(payload.size));
  uint8_t* at = fields.SerializeWithCachedSizesToArray(const_cast<uint8_t*>(head.begin()));
  at = CodedOutputStream::WriteTagToArray(kGetBlocksDataTag, at);
  CodedOutputStream::WriteVarint64ToArray(payload.size, at);
  grpc::Slice slices[2] = {std::move(head),
                           grpc::Slice(const_cast<char*>(payload.data), payload.size, &ReleaseOwner,
                                       new std::shared_ptr<const void>(payload.owner))};
  return grpc::ByteBuffer(slices, 2);
}

absl::Status ParseLookupRequest(std::string_view bytes, LookupRequestView* out) {
  *out = LookupRequestView{};
  if (bytes.size() > static_cast<size_t>(INT_MAX)) return NotALookupRequest("over 2 GiB");
  CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                      static_cast<int>(bytes.size()));
  v1::PolicyTuning tuning;
  bool has_tuning = false;
  for (;;) {
    const uint32_t tag = in.ReadTag();
    switch (tag) {
      case 0:  // the end of the message, or a tag that is not one
        if (in.ConsumedEntireMessage()) {
          if (has_tuning)
            out->follow_tuning = PolicyTuning{tuning.half_life(), tuning.unseen_age()};
          return absl::OkStatus();
        }
        return NotALookupRequest("truncated tag or field number 0");
      case kLookupNamespaceIdTag:
        if (!in.ReadLittleEndian64(&out->namespace_id)) {
          return NotALookupRequest("truncated fixed64");
        }
        break;
      case kLookupBlockHashesTag: {
        int size = 0;
        if (!in.ReadVarintSizeAsInt(&size)) return NotALookupRequest("truncated bytes length");
        const int at = in.CurrentPosition();  // the array's offset: views stay in `bytes`
        if (!in.Skip(size)) return NotALookupRequest("truncated bytes");
        out->block_hashes.push_back(bytes.substr(at, size));
        break;
      }
      case kLookupFollowTuningTag: {
        // A message field seen more than once merges, as protobuf does.
        int size = 0;
        if (!in.ReadVarintSizeAsInt(&size)) return NotALookupRequest("truncated message length");
        const int at = in.CurrentPosition();
        if (!in.Skip(size)) return NotALookupRequest("truncated message");
        CodedInputStream sub(reinterpret_cast<const uint8_t*>(bytes.data()) + at, size);
        if (!tuning.MergeFromCodedStream(&sub) || !sub.ConsumedEntireMessage()) {
          return NotALookupRequest("malformed follow_tuning");
        }
        has_tuning = true;
        break;
      }
      case kLookupLeaseSecondsTag:
        if (!in.ReadVarint32(&out->lease_seconds)) return NotALookupRequest("truncated varint");
        break;
      default:  // an unknown field (or a known one with another wire type), skipped as protobuf
        if (!WireFormatLite::SkipField(&in, tag)) {
          return NotALookupRequest("truncated or malformed unknown field");
        }
        break;
    }
  }
}

}  // namespace turbokv::server
