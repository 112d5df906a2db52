#include "wire_format.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace turbokv::client::internal {
namespace {

// A read position over a list of byte pieces.
class Cursor {
 public:
  explicit Cursor(absl::Span<const absl::string_view> pieces) : pieces_(pieces) { SkipEmpty(); }

  bool AtEnd() const { return piece_ == pieces_.size(); }

  bool Byte(uint8_t* b) {
    if (AtEnd()) return false;
    *b = static_cast<uint8_t>(pieces_[piece_][pos_]);
    Advance(1);
    return true;
  }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = 0;
      if (!Byte(&b)) return false;
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // more than 10 bytes
  }

  // The next n bytes as views (appended to *out when out is not null).
  bool Take(uint64_t n, std::vector<absl::string_view>* out) {
    while (n > 0) {
      if (AtEnd()) return false;
      const absl::string_view p = pieces_[piece_].substr(pos_);
      const size_t k = static_cast<size_t>(std::min<uint64_t>(n, p.size()));
      if (out != nullptr) out->push_back(p.substr(0, k));
      Advance(k);
      n -= k;
    }
    return true;
  }

 private:
  void Advance(size_t k) {
    pos_ += k;
    if (pos_ == pieces_[piece_].size()) {
      ++piece_;
      pos_ = 0;
      SkipEmpty();
    }
  }
  void SkipEmpty() {
    while (piece_ < pieces_.size() && pieces_[piece_].empty()) ++piece_;
  }

  absl::Span<const absl::string_view> pieces_;
  size_t piece_ = 0;
  size_t pos_ = 0;
};

void PutVarint(std::string* out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>((v & 0x7f) | 0x80));
  out->push_back(static_cast<char>(v));
}

absl::Status Malformed(const char* what) {
  return absl::DataLossError(absl::StrCat("GetBlocks response does not parse: ", what));
}

}  // namespace

absl::Status ParseGetBlocksResponse(absl::Span<const absl::string_view> pieces, WireChunk* out) {
  *out = WireChunk{};
  Cursor c(pieces);
  while (!c.AtEnd()) {
    uint64_t tag = 0;
    if (!c.Varint(&tag)) return Malformed("truncated tag");
    const uint64_t field = tag >> 3;
    const int wire_type = static_cast<int>(tag & 7);
    if (field == 0) return Malformed("field number 0");
    uint64_t v = 0;
    switch (wire_type) {
      case 0:  // varint
        if (!c.Varint(&v)) return Malformed("truncated varint");
        switch (field) {
          case 1: out->index = static_cast<uint32_t>(v); break;
          case 3: out->found = v != 0; break;
          case 4: out->encoding = static_cast<int>(v); break;
          case 5: out->dtype = static_cast<int>(v); break;
          case 6: out->block_bytes = v; break;
          case 7: out->offset = v; break;
          default: break;
        }
        break;
      case 1:  // fixed64
        if (!c.Take(8, nullptr)) return Malformed("truncated fixed64");
        break;
      case 5:  // fixed32
        if (!c.Take(4, nullptr)) return Malformed("truncated fixed32");
        break;
      case 2:  // length-delimited
        if (!c.Varint(&v)) return Malformed("truncated length");
        if (field == 8) {  // data; a repeated occurrence replaces the earlier one
          out->data.clear();
          out->data_size = v;
          if (!c.Take(v, &out->data)) return Malformed("truncated data");
        } else if (!c.Take(v, nullptr)) {
          return Malformed("truncated bytes field");
        }
        break;
      default:
        return Malformed("unsupported wire type");
    }
  }
  return absl::OkStatus();
}

grpc::ByteBuffer SerializeWithData(const google::protobuf::MessageLite& fields, int data_field,
                                   absl::string_view data) {
  std::string head;
  fields.SerializeToString(&head);
  if (data.empty()) {  // proto3 leaves an empty bytes field off the wire
    grpc::Slice only(head);
    return grpc::ByteBuffer(&only, 1);
  }
  PutVarint(&head, (static_cast<uint64_t>(data_field) << 3) | 2);  // tag (length-delimited)
  PutVarint(&head, data.size());                                   // then the length
  // One slice for both: the payload's single copy, and the header rides along.
  grpc::Slice out(head.size() + data.size());
  auto* at = const_cast<uint8_t*>(out.begin());
  std::memcpy(at, head.data(), head.size());
  std::memcpy(at + head.size(), data.data(), data.size());
  return grpc::ByteBuffer(&out, 1);
}

grpc::ByteBuffer SerializeLookupRequest(uint64_t namespace_id,
                                        absl::Span<const std::string> hashes,
                                        uint32_t lease_seconds) {
  size_t size = namespace_id != 0 ? 9 : 0;
  for (const std::string& h : hashes) size += 2 + (h.size() >= 128 ? 9 : 0) + h.size();
  std::string out;
  out.reserve(size + 6);
  if (namespace_id != 0) {  // field 1, fixed64 (proto3 leaves a zero off the wire)
    out.push_back(static_cast<char>((1 << 3) | 1));
    for (int b = 0; b < 8; ++b) out.push_back(static_cast<char>(namespace_id >> (8 * b)));
  }
  for (const std::string& h : hashes) {  // field 2, repeated bytes
    out.push_back(static_cast<char>((2 << 3) | 2));
    PutVarint(&out, h.size());
    out.append(h);
  }
  if (lease_seconds != 0) {  // field 3, varint
    out.push_back(static_cast<char>(3 << 3));
    PutVarint(&out, lease_seconds);
  }
  grpc::Slice slice(out);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace turbokv::client::internal
