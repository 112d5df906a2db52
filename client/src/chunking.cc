#include "chunking.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace turbokv::client::internal {

std::vector<ChunkRange> SplitIntoChunks(uint64_t block_bytes, uint64_t max_chunk_bytes) {
  if (max_chunk_bytes == 0) max_chunk_bytes = 1;
  std::vector<ChunkRange> out;
  if (block_bytes == 0) {
    out.push_back({0, 0});
    return out;
  }
  out.reserve((block_bytes + max_chunk_bytes - 1) / max_chunk_bytes);
  for (uint64_t off = 0; off < block_bytes; off += max_chunk_bytes) {
    out.push_back({off, std::min(max_chunk_bytes, block_bytes - off)});
  }
  return out;
}

BlockAssembler::BlockAssembler(size_t num_blocks) : slots_(num_blocks) {}

absl::Status BlockAssembler::AddMissing(uint32_t index) {
  if (index >= slots_.size()) {
    return absl::DataLossError(absl::StrCat("GetBlocks response for index ", index, " but ",
                                            slots_.size(), " blocks were requested"));
  }
  Slot& s = slots_[index];
  if (s.state != State::kPending) {
    return absl::DataLossError(
        absl::StrCat("GetBlocks reported block ", index, " missing after other responses"));
  }
  s.state = State::kMissing;
  return absl::OkStatus();
}

absl::Status BlockAssembler::Check(uint32_t index, uint64_t block_bytes, uint64_t offset,
                                   uint64_t size) {
  if (index >= slots_.size()) {
    return absl::DataLossError(absl::StrCat("GetBlocks response for index ", index, " but ",
                                            slots_.size(), " blocks were requested"));
  }
  Slot& s = slots_[index];
  switch (s.state) {
    case State::kMissing:
      return absl::DataLossError(
          absl::StrCat("GetBlocks sent data for block ", index, " after reporting it missing"));
    case State::kDone:
      return absl::DataLossError(
          absl::StrCat("GetBlocks sent more data for block ", index, " after it was complete"));
    case State::kPending:
      if (offset != 0) {
        return absl::DataLossError(
            absl::StrCat("GetBlocks block ", index, " starts at offset ", offset, ", expected 0"));
      }
      break;
    case State::kPartial:
      if (block_bytes != s.block_bytes) {
        return absl::DataLossError(absl::StrCat("GetBlocks block ", index, " changed size from ",
                                                s.block_bytes, " to ", block_bytes));
      }
      if (offset != s.data.size()) {
        return absl::DataLossError(absl::StrCat("GetBlocks block ", index, " chunk at offset ",
                                                offset, ", expected ", s.data.size()));
      }
      break;
  }
  if (offset + size > block_bytes || offset + size < offset) {
    return absl::DataLossError(absl::StrCat("GetBlocks block ", index, " chunk [", offset, ", ",
                                            offset + size, ") exceeds block_bytes ", block_bytes));
  }
  return absl::OkStatus();
}

absl::Status BlockAssembler::AddChunk(uint32_t index, uint64_t block_bytes, uint64_t offset,
                                      absl::string_view data) {
  if (absl::Status st = Check(index, block_bytes, offset, data.size()); !st.ok()) return st;
  Slot& s = slots_[index];
  if (s.state == State::kPending) {
    s.block_bytes = block_bytes;
    s.data.reserve(block_bytes);
  }
  s.data.append(data.data(), data.size());
  s.state = s.data.size() == block_bytes ? State::kDone : State::kPartial;
  return absl::OkStatus();
}

absl::Status BlockAssembler::AddChunk(uint32_t index, uint64_t block_bytes, uint64_t offset,
                                      absl::Span<const absl::string_view> pieces, uint64_t size) {
  if (absl::Status st = Check(index, block_bytes, offset, size); !st.ok()) return st;
  Slot& s = slots_[index];
  if (s.state == State::kPending) {
    s.block_bytes = block_bytes;
    s.data.reserve(block_bytes);
  }
  for (absl::string_view p : pieces) s.data.append(p.data(), p.size());
  s.state = s.data.size() == block_bytes ? State::kDone : State::kPartial;
  return absl::OkStatus();
}

absl::Status BlockAssembler::AddChunk(uint32_t index, uint64_t block_bytes, uint64_t offset,
                                      std::string&& data) {
  if (index < slots_.size() && slots_[index].state == State::kPending &&
      data.size() == block_bytes) {
    if (absl::Status st = Check(index, block_bytes, offset, data.size()); !st.ok()) return st;
    Slot& s = slots_[index];
    s.block_bytes = block_bytes;
    s.data = std::move(data);
    s.state = State::kDone;
    return absl::OkStatus();
  }
  return AddChunk(index, block_bytes, offset, absl::string_view(data));
}

absl::Status BlockAssembler::Finish(std::vector<std::optional<std::string>>* out) {
  out->clear();
  out->reserve(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    switch (s.state) {
      case State::kPending:
        return absl::DataLossError(
            absl::StrCat("GetBlocks stream ended without a response for block ", i));
      case State::kPartial:
        return absl::DataLossError(absl::StrCat("GetBlocks stream ended with block ", i,
                                                " incomplete: ", s.data.size(), " of ",
                                                s.block_bytes, " bytes"));
      case State::kMissing:
        out->push_back(std::nullopt);
        break;
      case State::kDone:
        out->push_back(std::move(s.data));
        break;
    }
  }
  slots_.clear();
  return absl::OkStatus();
}

}  // namespace turbokv::client::internal
