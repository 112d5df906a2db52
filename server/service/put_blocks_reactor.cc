#include "server/service/put_blocks_reactor.h"

#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace turbokv::server {
namespace {

// A batch goes to the pool once it holds this many bytes or blocks; a stream keeps at most
// kMaxInFlight batches on the pool and stops reading while it has that many (backpressure).
constexpr size_t kBatchBytes = size_t{16} << 20;
constexpr size_t kBatchBlocks = 64;
constexpr int kMaxInFlight = 2;

// Hex of a block hash for messages; a (malformed) hash longer than 32 bytes is cut short so a
// hostile client cannot blow up the response.
std::string Hex(std::string_view hash) {
  if (hash.size() <= kMaxBlockHashBytes) {
    return absl::BytesToHexString(absl::string_view(hash.data(), hash.size()));
  }
  return absl::StrCat(absl::BytesToHexString(absl::string_view(hash.data(), kMaxBlockHashBytes)),
                      "...(", hash.size(), " bytes)");
}

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

absl::Span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

absl::Status ValidatePackedBlock(const Namespace& ns, absl::Span<const uint8_t> packed) {
  absl::StatusOr<codec::PackedBlockInfo> info = codec::ParsePackedBlock(packed);
  if (!info.ok()) {
    return absl::Status(info.status().code(),
                        absl::StrCat("malformed packed block: ", info.status().message()));
  }
  if (info->namespace_id != ns.id) {
    return absl::InvalidArgumentError(absl::StrCat("packed block was encoded for namespace ",
                                                   absl::Hex(info->namespace_id, absl::kZeroPad16),
                                                   ", not ", absl::Hex(ns.id, absl::kZeroPad16)));
  }
  absl::Span<const uint8_t> header = ns.codec.header();
  if (packed.size() < header.size() ||
      std::memcmp(packed.data(), header.data(), header.size()) != 0) {
    return absl::InvalidArgumentError(
        "packed block header does not match the namespace's codec (shape, dtype, codec "
        "parameters or seeds differ)");
  }
  absl::Status checksum = codec::VerifyPackedChecksum(packed);
  if (!checksum.ok()) {
    return absl::DataLossError(
        absl::StrCat("packed block fails its checksum: ", checksum.message()));
  }
  // As strict as the RAW path: finite scales, residual norms and plain values.
  return ns.codec.ValidatePackedValues(packed);
}

PutBlocksReactor::PutBlocksReactor(ServiceContext* ctx, v1::PutBlocksResponse* response)
    : ctx_(ctx), response_(response), scope_(ctx, RpcMethod::kPutBlocks) {
  if (ctx_->shutting_down.load()) {
    finished_ = true;
    Finish(scope_.Complete(ShuttingDown()));
    return;
  }
  StartRead(&request_);
}

void PutBlocksReactor::OnReadDone(bool ok) {
  std::unique_lock<std::mutex> l(mu_);
  if (!ok) {
    reading_done_ = true;
    if (current_.has_value()) {
      FailCurrent(absl::InvalidArgumentError(absl::StrCat(
          "stream ended after ", current_->data.size(), " of ", current_->expected_bytes,
          " bytes of block ", Hex(current_->hash), "; the block was not stored")));
    }
    SubmitBatch();
  } else {
    HandleMessage(request_);
    if (!fatal_.ok()) {
      reading_done_ = true;  // stop reading; the stream cannot be trusted any more
    } else if (batch_bytes_ >= kBatchBytes || batch_.size() >= kBatchBlocks) {
      SubmitBatch();
    }
  }
  if (reading_done_) {
    if (ReadyToFinish()) {
      l.unlock();
      FinishNow();
    }
    return;
  }
  if (in_flight_ >= kMaxInFlight) {
    paused_ = true;
    return;
  }
  l.unlock();
  StartRead(&request_);
}

void PutBlocksReactor::HandleMessage(const v1::PutBlocksRequest& req) {
  if (ns_ == nullptr) {
    absl::StatusOr<std::shared_ptr<const Namespace>> ns = ctx_->registry->Get(req.namespace_id());
    if (!ns.ok()) {
      fatal_ = ns.status();
      return;
    }
    ns_ = *std::move(ns);
  } else if (req.namespace_id() != ns_->id) {
    fatal_ = absl::InvalidArgumentError(absl::StrCat(
        "namespace_id changed within the stream from ", absl::Hex(ns_->id, absl::kZeroPad16),
        " to ", absl::Hex(req.namespace_id(), absl::kZeroPad16),
        "; one PutBlocks stream writes one namespace"));
    return;
  }
  const std::string& hash = req.block_hash();
  if (current_.has_value()) {
    if (hash == current_->hash && req.offset() == current_->data.size()) {
      AppendChunk(req);
      return;
    }
    if (req.offset() == 0) {
      FailCurrent(absl::InvalidArgumentError(absl::StrCat(
          "block ", Hex(current_->hash), " ended after ", current_->data.size(), " of ",
          current_->expected_bytes, " bytes (the next block started); it was not stored")));
    } else {
      skip_hash_ = current_->hash;
      FailCurrent(absl::InvalidArgumentError(
          absl::StrCat("expected the chunk at offset ", current_->data.size(), " of block ",
                       Hex(current_->hash), ", got offset ", req.offset(), " of block ", Hex(hash),
                       "; chunks of a block must arrive in order")));
    }
  }
  if (req.offset() != 0) {
    if (!skip_hash_.empty() && hash == skip_hash_) return;  // rest of a rejected block
    skip_hash_ = hash;
    AddResult(hash, absl::InvalidArgumentError(
                        absl::StrCat("chunk at offset ", req.offset(), " of block ", Hex(hash),
                                     " arrived without the block's first chunk (offset 0)")));
    return;
  }
  skip_hash_.clear();
  StartBlock(req);
}

void PutBlocksReactor::StartBlock(const v1::PutBlocksRequest& req) {
  const std::string& hash = req.block_hash();
  absl::Status s = ValidateBlockHash(hash);
  uint64_t expected = 0;
  if (s.ok()) {
    if (req.encoding() == v1::ENCODING_RAW) {
      expected = ns_->codec.raw_bytes();
      if (req.block_bytes() != expected) {
        const codec::BlockShape& sh = ns_->codec.shape();
        s = absl::InvalidArgumentError(
            absl::StrCat("block_bytes ", req.block_bytes(), " of RAW block ", Hex(hash),
                         " is not the namespace's raw block size ", expected, " ([", sh.num_layers,
                         "][2][", sh.block_tokens, "][", sh.num_kv_heads, "][", sh.head_dim,
                         "] of ", std::string(codec::DTypeName(sh.dtype)), ")"));
      }
    } else if (req.encoding() == v1::ENCODING_PACKED) {
      expected = ns_->codec.packed_bytes();
      if (req.block_bytes() != expected) {
        s = absl::InvalidArgumentError(
            absl::StrCat("block_bytes ", req.block_bytes(), " of PACKED block ", Hex(hash),
                         " is not the namespace's packed block size ", expected));
      }
    } else {
      s = absl::InvalidArgumentError(absl::StrCat("encoding of block ", Hex(hash),
                                                  " must be ENCODING_RAW or ENCODING_PACKED"));
    }
  }
  if (!s.ok()) {
    skip_hash_ = hash;
    AddResult(hash, s);
    return;
  }
  Block block;
  block.index = AddResult(hash, absl::OkStatus());
  block.hash = hash;
  block.encoding = req.encoding();
  block.expected_bytes = expected;
  block.data.reserve(expected);
  current_ = std::move(block);
  AppendChunk(req);
}

void PutBlocksReactor::AppendChunk(const v1::PutBlocksRequest& req) {
  Block& b = *current_;
  if ((req.block_bytes() != 0 && req.block_bytes() != b.expected_bytes) ||
      (req.encoding() != v1::ENCODING_UNSPECIFIED && req.encoding() != b.encoding)) {
    skip_hash_ = b.hash;
    FailCurrent(absl::InvalidArgumentError(
        absl::StrCat("chunk at offset ", req.offset(), " of block ", Hex(b.hash),
                     " changes block_bytes or encoding from the block's first chunk")));
    return;
  }
  if (b.data.size() + req.data().size() > b.expected_bytes) {
    skip_hash_ = b.hash;
    FailCurrent(absl::InvalidArgumentError(
        absl::StrCat("chunk at offset ", req.offset(), " with ", req.data().size(),
                     " bytes overruns block ", Hex(b.hash), " of block_bytes ", b.expected_bytes)));
    return;
  }
  b.data.append(req.data());
  if (b.data.size() == b.expected_bytes) {
    batch_bytes_ += b.data.size();
    batch_.push_back(std::move(b));
    current_.reset();
  }
}

size_t PutBlocksReactor::AddResult(const std::string& hash, const absl::Status& status) {
  v1::BlockResult r;
  // Echo the hash; a malformed overlong one only in part (results are matched by position).
  r.set_block_hash(hash.size() <= 2 * kMaxBlockHashBytes ? hash
                                                         : hash.substr(0, 2 * kMaxBlockHashBytes));
  r.set_code(static_cast<int32_t>(status.code()));
  r.set_message(std::string(status.message()));
  results_.push_back(std::move(r));
  return results_.size() - 1;
}

void PutBlocksReactor::FailCurrent(const absl::Status& status) {
  v1::BlockResult& r = results_[current_->index];
  r.set_code(static_cast<int32_t>(status.code()));
  r.set_message(std::string(status.message()));
  current_.reset();
}

void PutBlocksReactor::SubmitBatch() {
  if (batch_.empty()) return;
  ++in_flight_;
  std::vector<Block> blocks = std::move(batch_);
  batch_.clear();
  batch_bytes_ = 0;
  ctx_->pool->Submit([this, blocks = std::move(blocks)]() mutable { RunBatch(std::move(blocks)); });
}

void PutBlocksReactor::RunBatch(std::vector<Block> blocks) {
  const Namespace& ns = *ns_;  // set before any block is accepted, never changed after
  std::vector<absl::Status> statuses(blocks.size());
  std::vector<std::string> packed(blocks.size());

  // RAW blocks: one encode batch (one launch on the GPU backend).
  std::vector<size_t> raw_index;
  std::vector<absl::Span<const uint8_t>> raws;
  std::vector<absl::Span<uint8_t>> outs;
  uint64_t raw_bytes = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].encoding != v1::ENCODING_RAW) continue;
    packed[i].resize(ns.codec.packed_bytes());
    raw_index.push_back(i);
    raws.push_back(Bytes(blocks[i].data));
    outs.emplace_back(reinterpret_cast<uint8_t*>(packed[i].data()), packed[i].size());
    raw_bytes += blocks[i].data.size();
  }
  if (!raw_index.empty()) {
    const auto start = std::chrono::steady_clock::now();
    std::vector<absl::Status> encoded = EncodeBlocks(ctx_->backend, ns.codec, raws, outs);
    ctx_->metrics->RecordCodec(CodecOp::kEncode, SecondsSince(start), raw_bytes);
    for (size_t j = 0; j < raw_index.size(); ++j) {
      statuses[raw_index[j]] = std::move(encoded[j]);
      std::string().swap(blocks[raw_index[j]].data);  // the raw copy is no longer needed
    }
  }
  // PACKED blocks: validated, then stored untouched.
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].encoding != v1::ENCODING_PACKED) continue;
    const auto start = std::chrono::steady_clock::now();
    statuses[i] = ValidatePackedBlock(ns, Bytes(blocks[i].data));
    ctx_->metrics->RecordCodec(CodecOp::kVerify, SecondsSince(start), blocks[i].data.size());
    packed[i] = std::move(blocks[i].data);
  }
  std::vector<BlockStore::BlockWrite> writes;
  std::vector<size_t> written;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (!statuses[i].ok()) continue;
    writes.push_back({blocks[i].hash, packed[i]});
    written.push_back(i);
  }
  if (!writes.empty()) {
    std::vector<absl::Status> put = ctx_->store->PutBlocks(ns.id, writes);
    for (size_t j = 0; j < written.size(); ++j) statuses[written[j]] = put[j];
  }

  std::unique_lock<std::mutex> l(mu_);
  for (size_t i = 0; i < blocks.size(); ++i) {
    v1::BlockResult& r = results_[blocks[i].index];
    r.set_code(static_cast<int32_t>(statuses[i].code()));
    r.set_message(std::string(statuses[i].message()));
    if (statuses[i].ok()) r.set_stored_bytes(packed[i].size());
  }
  --in_flight_;
  if (ReadyToFinish()) {
    l.unlock();
    FinishNow();
    return;
  }
  if (paused_ && !reading_done_) {
    paused_ = false;
    l.unlock();
    StartRead(&request_);
  }
}

bool PutBlocksReactor::ReadyToFinish() {
  if (finished_ || !reading_done_ || in_flight_ > 0) return false;
  finished_ = true;
  return true;
}

void PutBlocksReactor::FinishNow() {
  // Only one thread gets here (finished_ was set under mu_); nothing else touches the state.
  if (!fatal_.ok()) {
    Finish(scope_.Complete(fatal_));
    return;
  }
  for (v1::BlockResult& r : results_) {
    ctx_->metrics->RecordPutBlock(static_cast<absl::StatusCode>(r.code()));
    *response_->add_results() = std::move(r);
  }
  Finish(scope_.Complete(absl::OkStatus()));
}

}  // namespace turbokv::server
