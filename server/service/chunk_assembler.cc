#include "server/service/chunk_assembler.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/storage/block_store.h"

namespace turbokv::server {

std::string HashHex(std::string_view hash) {
  if (hash.size() <= kMaxBlockHashBytes) {
    return absl::BytesToHexString(absl::string_view(hash.data(), hash.size()));
  }
  return absl::StrCat(absl::BytesToHexString(absl::string_view(hash.data(), kMaxBlockHashBytes)),
                      "...(", hash.size(), " bytes)");
}

ChunkAssembler::ChunkAssembler(BlockSizes sizes, const v1::PutBlocksRequest& first)
    : sizes_(std::move(sizes)) {
  if (first.has_header()) {
    // The stream's header (PutBlocksHeader, proto): only the first message may carry it.
    if (first.header().block_count() != 0) declared_ = first.header().block_count();
    chain_continues_ = first.header().chain_continues();
  }
}

absl::Status ChunkAssembler::Accept(v1::PutBlocksRequest& req, Step* step) {
  *step = Step();
  const std::string& hash = req.block_hash();
  // (The rest of a refused last block is dropped below.)
  if (all_declared_in() && !(req.offset() != 0 && skip_hash_.has_value() && hash == *skip_hash_)) {
    return absl::InvalidArgumentError(absl::StrCat("the stream sent more than the ", *declared_,
                                                   " blocks its header's block_count declared"));
  }
  if (!std::exchange(first_, false)) {
    if (req.namespace_id() != sizes_.namespace_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "namespace_id ", absl::Hex(req.namespace_id(), absl::kZeroPad16),
          " is not the stream's namespace ", absl::Hex(sizes_.namespace_id, absl::kZeroPad16),
          " (its first message's); one PutBlocks stream writes one namespace"));
    }
    if (req.has_header()) {
      return absl::InvalidArgumentError(
          "a PutBlocks message after the stream's first carries a header; only the first may");
    }
  }
  if (current_.has_value()) {
    if (hash == current_->hash && req.offset() == current_->received) {
      Append(req, step);
      return absl::OkStatus();
    }
    if (req.offset() == 0) {
      CutCurrent(absl::InvalidArgumentError(
                     absl::StrCat("block ", HashHex(current_->hash), " ended after ",
                                  current_->received, " of ", current_->expected,
                                  " bytes (the next block started); it was not "
                                  "stored")),
                 step);
    } else {
      skip_hash_ = current_->hash;
      CutCurrent(absl::InvalidArgumentError(absl::StrCat(
                     "expected the chunk at offset ", current_->received, " of block ",
                     HashHex(current_->hash), ", got offset ", req.offset(), " of block ",
                     HashHex(hash), "; chunks of a block must arrive in order")),
                 step);
    }
  }
  if (req.offset() != 0) {
    if (skip_hash_.has_value() && hash == *skip_hash_) return absl::OkStatus();  // refused rest
    skip_hash_ = hash;
    Refuse(hash,
           absl::InvalidArgumentError(absl::StrCat("chunk at offset ", req.offset(), " of block ",
                                                   HashHex(hash),
                                                   " arrived without the block's first chunk "
                                                   "(offset 0)")),
           step);
    return absl::OkStatus();
  }
  skip_hash_.reset();
  Start(req, step);
  return absl::OkStatus();
}

std::optional<ChunkAssembler::Step::Cut> ChunkAssembler::End() {
  if (!current_.has_value()) return std::nullopt;
  Step::Cut cut{current_->index,
                absl::InvalidArgumentError(absl::StrCat(
                    "stream ended after ", current_->received, " of ", current_->expected,
                    " bytes of block ", HashHex(current_->hash), "; the block was not stored"))};
  current_.reset();
  return cut;
}

void ChunkAssembler::Start(v1::PutBlocksRequest& req, Step* step) {
  const std::string& hash = req.block_hash();
  absl::Status s = ValidateBlockHash(hash);
  uint64_t expected = 0;
  if (s.ok()) {
    if (req.encoding() == v1::ENCODING_RAW) {
      expected = sizes_.raw_bytes;
      if (req.block_bytes() != expected) {
        s = absl::InvalidArgumentError(absl::StrCat(
            "block_bytes ", req.block_bytes(), " of RAW block ", HashHex(hash),
            " is not the namespace's raw block size ", expected, " (", sizes_.raw_layout, ")"));
      }
    } else if (req.encoding() == v1::ENCODING_PACKED) {
      expected = sizes_.packed_bytes;
      if (req.block_bytes() != expected) {
        s = absl::InvalidArgumentError(
            absl::StrCat("block_bytes ", req.block_bytes(), " of PACKED block ", HashHex(hash),
                         " is not the namespace's packed block size ", expected));
      }
    } else {
      s = absl::InvalidArgumentError(absl::StrCat("encoding of block ", HashHex(hash),
                                                  " must be ENCODING_RAW or ENCODING_PACKED"));
    }
  }
  // The store keeps the tenant within its quota as blocks commit (evicting the tenant's own
  // blocks: block_store.h, "Tenants"); a block larger than the whole quota could never be
  // stored, so it is refused before its bytes are read.
  if (s.ok() && sizes_.quota_bytes != 0 && sizes_.packed_bytes > sizes_.quota_bytes) {
    s = absl::ResourceExhaustedError(
        absl::StrCat("a block of this namespace is ", sizes_.packed_bytes,
                     " packed bytes, over this tenant's quota of ", sizes_.quota_bytes, " bytes"));
  }
  if (s.ok() && req.data().size() > expected) {
    s = absl::InvalidArgumentError(absl::StrCat("chunk at offset 0 with ", req.data().size(),
                                                " bytes overruns block ", HashHex(hash),
                                                " of block_bytes ", expected));
  }
  if (!s.ok()) {
    skip_hash_ = hash;
    Refuse(hash, std::move(s), step);
    return;
  }
  step->result = absl::OkStatus();
  step->result_hash = hash;
  step->result_index = results_;
  step->encoding = req.encoding();
  step->block_bytes = expected;
  current_ = Current{results_++, hash, req.encoding(), expected};
  Append(req, step);
}

void ChunkAssembler::Append(v1::PutBlocksRequest& req, Step* step) {
  Current& b = *current_;
  if ((req.block_bytes() != 0 && req.block_bytes() != b.expected) ||
      (req.encoding() != v1::ENCODING_UNSPECIFIED && req.encoding() != b.encoding)) {
    skip_hash_ = b.hash;
    CutCurrent(absl::InvalidArgumentError(
                   absl::StrCat("chunk at offset ", req.offset(), " of block ", HashHex(b.hash),
                                " changes block_bytes or encoding from the block's first chunk")),
               step);
    return;
  }
  const uint64_t n = req.data().size();
  if (b.received + n > b.expected) {
    skip_hash_ = b.hash;
    CutCurrent(absl::InvalidArgumentError(absl::StrCat("chunk at offset ", req.offset(), " with ",
                                                       n, " bytes overruns block ", HashHex(b.hash),
                                                       " of block_bytes ", b.expected)),
               step);
    return;
  }
  step->chunk = true;
  step->block_index = b.index;
  step->offset = b.received;
  step->data = std::move(*req.mutable_data());  // no copy
  b.received += n;
  if (b.received == b.expected) {
    step->completes = true;
    current_.reset();
  }
}

void ChunkAssembler::Refuse(const std::string& hash, absl::Status status, Step* step) {
  step->result = std::move(status);
  step->result_hash = hash;
  step->result_index = results_++;
}

void ChunkAssembler::CutCurrent(absl::Status status, Step* step) {
  step->cut = Step::Cut{current_->index, std::move(status)};
  current_.reset();
}

}  // namespace turbokv::server
