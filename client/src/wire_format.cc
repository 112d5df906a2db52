#include "wire_format.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/container/fixed_array.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/wire_format_lite.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::client::internal {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::ArrayInputStream;
using google::protobuf::io::CodedInputStream;
using google::protobuf::io::CodedOutputStream;
using google::protobuf::io::ConcatenatingInputStream;
using google::protobuf::io::ZeroCopyInputStream;
using Response = v1::GetBlocksResponse;
using Lookup = v1::LookupRequest;

constexpr uint32_t Tag(int field, WireFormatLite::WireType type) {
  return WireFormatLite::MakeTag(field, type);
}
constexpr auto kVarint = WireFormatLite::WIRETYPE_VARINT;
constexpr auto kBytes = WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
constexpr size_t kInlinePieces = 128;

absl::Status Malformed(const char* what) {
  return absl::DataLossError(absl::StrCat("GetBlocks response does not parse: ", what));
}

}  // namespace

absl::Status ParseGetBlocksResponse(absl::Span<const absl::string_view> pieces, WireChunk* out) {
  *out = WireChunk{};
  // protobuf's reader over the pieces in order; the views it hands out point into them. A
  // message of up to kInlinePieces slices needs no allocation for it (gRPC on loopback hands
  // over a 1 MiB message in 81-89 slices).
  absl::FixedArray<std::optional<ArrayInputStream>, kInlinePieces> arrays(pieces.size());
  absl::FixedArray<ZeroCopyInputStream*, kInlinePieces> streams(pieces.size());
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].size() > static_cast<size_t>(INT32_MAX)) return Malformed("a piece over 2 GiB");
    streams[i] = &arrays[i].emplace(pieces[i].data(), static_cast<int>(pieces[i].size()));
  }
  ConcatenatingInputStream concatenated(streams.data(), static_cast<int>(streams.size()));
  CodedInputStream in(&concatenated);
  uint64_t v = 0;
  for (;;) {
    const uint32_t tag = in.ReadTag();
    switch (tag) {
      case 0:  // the end of the message, or a tag that is not one
        if (in.ConsumedEntireMessage()) return absl::OkStatus();
        return Malformed("truncated tag or field number 0");
      case Tag(Response::kIndexFieldNumber, kVarint):
      case Tag(Response::kFoundFieldNumber, kVarint):
      case Tag(Response::kEncodingFieldNumber, kVarint):
      case Tag(Response::kDtypeFieldNumber, kVarint):
      case Tag(Response::kBlockBytesFieldNumber, kVarint):
      case Tag(Response::kOffsetFieldNumber, kVarint):
        if (!in.ReadVarint64(&v)) return Malformed("truncated varint");
        switch (WireFormatLite::GetTagFieldNumber(tag)) {
          case Response::kIndexFieldNumber:
            out->index = static_cast<uint32_t>(v);
            break;
          case Response::kFoundFieldNumber:
            out->found = v != 0;
            break;
          case Response::kEncodingFieldNumber:
            out->encoding = static_cast<int>(v);
            break;
          case Response::kDtypeFieldNumber:
            out->dtype = static_cast<int>(v);
            break;
          case Response::kBlockBytesFieldNumber:
            out->block_bytes = v;
            break;
          default:
            out->offset = v;
            break;
        }
        break;
      case Tag(Response::kDataFieldNumber, kBytes): {
        // A repeated occurrence replaces the earlier one, as protobuf's would.
        int size = 0;
        if (!in.ReadVarintSizeAsInt(&size)) return Malformed("truncated data length");
        out->data.clear();
        out->data_size = static_cast<uint64_t>(size);
        while (size > 0) {  // views into the pieces, one per piece the field spans
          const void* at = nullptr;
          int n = 0;
          if (!in.GetDirectBufferPointer(&at, &n)) return Malformed("truncated data");
          n = std::min(n, size);
          out->data.emplace_back(static_cast<const char*>(at), static_cast<size_t>(n));
          in.Skip(n);  // within the buffer GetDirectBufferPointer returned: cannot fail
          size -= n;
        }
        break;
      }
      default:  // an unknown field (or a known one with another wire type), skipped as protobuf
        if (!WireFormatLite::SkipField(&in, tag)) {
          return Malformed("truncated or malformed unknown field");
        }
        break;
    }
  }
}

grpc::ByteBuffer SerializeWithData(const google::protobuf::MessageLite& fields, int data_field,
                                   absl::string_view data) {
  const size_t fields_size = fields.ByteSizeLong();
  if (data.empty()) {  // proto3 leaves an empty bytes field off the wire
    grpc::Slice only(fields_size);
    fields.SerializeWithCachedSizesToArray(const_cast<uint8_t*>(only.begin()));
    return grpc::ByteBuffer(&only, 1);
  }
  const uint32_t tag = Tag(data_field, kBytes);
  // One slice for the fields, the tag and length of `data`, and `data`: the payload's single
  // copy, and the header rides along.
  grpc::Slice out(fields_size + CodedOutputStream::VarintSize32(tag) +
                  CodedOutputStream::VarintSize64(data.size()) + data.size());
  uint8_t* at = fields.SerializeWithCachedSizesToArray(const_cast<uint8_t*>(out.begin()));
  at = CodedOutputStream::WriteTagToArray(tag, at);
  at = CodedOutputStream::WriteVarint64ToArray(data.size(), at);
  std::memcpy(at, data.data(), data.size());
  return grpc::ByteBuffer(&out, 1);
}

grpc::ByteBuffer SerializeLookupRequest(uint64_t namespace_id, absl::Span<const std::string> hashes,
                                        uint32_t lease_seconds,
                                        const std::optional<PolicyTuning>& follow_tuning) {
  // Sized as protobuf sizes the message (proto3 leaves zero scalars off the wire), then
  // written with its primitives in field order, straight into the slice.
  size_t size = 0;
  if (namespace_id != 0) {
    size += WireFormatLite::TagSize(Lookup::kNamespaceIdFieldNumber, WireFormatLite::TYPE_FIXED64) +
            WireFormatLite::kFixed64Size;
  }
  const size_t hash_tag_size =
      WireFormatLite::TagSize(Lookup::kBlockHashesFieldNumber, WireFormatLite::TYPE_BYTES);
  for (const std::string& h : hashes) size += hash_tag_size + WireFormatLite::BytesSize(h);
  if (lease_seconds != 0) {
    size += WireFormatLite::TagSize(Lookup::kLeaseSecondsFieldNumber, WireFormatLite::TYPE_UINT32) +
            WireFormatLite::UInt32Size(lease_seconds);
  }
  // follow_tuning: a message of two doubles (proto3: a zero one left off).
  const size_t double_size =
      WireFormatLite::TagSize(v1::PolicyTuning::kHalfLifeFieldNumber, WireFormatLite::TYPE_DOUBLE) +
      WireFormatLite::kDoubleSize;
  size_t tuning_size = 0;
  if (follow_tuning.has_value()) {
    if (follow_tuning->half_life != 0) tuning_size += double_size;
    if (follow_tuning->unseen_age != 0) tuning_size += double_size;
    size +=
        WireFormatLite::TagSize(Lookup::kFollowTuningFieldNumber, WireFormatLite::TYPE_MESSAGE) +
        WireFormatLite::LengthDelimitedSize(tuning_size);
  }
  grpc::Slice slice(size);
  auto* at = const_cast<uint8_t*>(slice.begin());
  if (namespace_id != 0) {
    at = WireFormatLite::WriteFixed64ToArray(Lookup::kNamespaceIdFieldNumber, namespace_id, at);
  }
  for (const std::string& h : hashes) {
    at = WireFormatLite::WriteBytesToArray(Lookup::kBlockHashesFieldNumber, h, at);
  }
  if (lease_seconds != 0) {
    at = WireFormatLite::WriteUInt32ToArray(Lookup::kLeaseSecondsFieldNumber, lease_seconds, at);
  }
  if (follow_tuning.has_value()) {
    at = WireFormatLite::WriteTagToArray(Lookup::kFollowTuningFieldNumber,
                                         WireFormatLite::WIRETYPE_LENGTH_DELIMITED, at);
    at = google::protobuf::io::CodedOutputStream::WriteVarint32ToArray(
        static_cast<uint32_t>(tuning_size), at);
    if (follow_tuning->half_life != 0) {
      at = WireFormatLite::WriteDoubleToArray(v1::PolicyTuning::kHalfLifeFieldNumber,
                                              follow_tuning->half_life, at);
    }
    if (follow_tuning->unseen_age != 0) {
      WireFormatLite::WriteDoubleToArray(v1::PolicyTuning::kUnseenAgeFieldNumber,
                                         follow_tuning->unseen_age, at);
    }
  }
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace turbokv::client::internal
