#include "server/service/put_blocks_reactor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace turbokv::server {
namespace {

// One message's bytes: a chunk of the API's largest size plus its header. A larger message
// (the server accepts up to max_receive_message_bytes) is charged in full once it is in.
constexpr uint64_t kReadReserveBytes = (uint64_t{1} << 20) + 4096;
// The read window: a stream reserves this much (at least one message's charge) before it
// reads, and reads on from the reservation until less than one message's charge is left. So
// what a stream holds follows what its client has sent: the blocks received and not yet
// committed plus at most one window; a stream that sends nothing holds one window.
constexpr uint64_t kReadWindowBytes = uint64_t{4} << 20;
// A stream stops reading while it holds this much (blocks received, not yet committed).
constexpr uint64_t kStreamWindowBytes = uint64_t{64} << 20;
// A commit takes at most this many bytes of ready blocks (one WriteBatch).
constexpr uint64_t kCommitBytes = uint64_t{64} << 20;
// Raw bytes of the smallest encode task: a chunk's sections are spread over tasks of at least
// this size, so the pool's threads share one large block.
constexpr size_t kTaskBytes = size_t{128} << 10;

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

absl::Span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

struct PutBlocksReactor::Block {
  size_t index = 0;  // position in results_
  std::string hash;
  v1::Encoding encoding = v1::ENCODING_UNSPECIFIED;
  uint64_t expected = 0;  // block_bytes, checked against the namespace
  uint64_t received = 0;
  // RAW: the packed block, written by the encode tasks (uninitialized until then).
  std::unique_ptr<uint8_t[]> packed;
  size_t packed_size = 0;
  std::string carry;        // streaming RAW: the start of a section split across chunks
  size_t next_section = 0;  // streaming RAW: first section not handed to a task yet
  std::string data;         // PACKED, and RAW on the CUDA backend: the reassembled block
  int tasks = 0;            // pool tasks of this block in flight
  bool received_all = false;
  bool ready = false;             // encoded / validated and sealed: may be committed
  bool failed = false;            // has its (non-OK) result; dropped
  uint64_t charge = 0;            // budget bytes held for it
  std::atomic<bool> dead{false};  // failed: tasks still queued skip their work

  std::string_view value() const {
    if (encoding == v1::ENCODING_PACKED) return data;
    return {reinterpret_cast<const char*>(packed.get()), packed_size};
  }
};

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

PutBlocksReactor::PutBlocksReactor(ServiceContext* ctx, grpc::CallbackServerContext* context,
                                   v1::PutBlocksResponse* response, Principal caller)
    : ctx_(ctx),
      caller_(std::move(caller)),
      response_(response),
      scope_(ctx, RpcMethod::kPutBlocks),
      context_(context),
      lease_(ctx->budget, caller_.tenant),
      call_deadline_(DefaultDeadline(*ctx, *context)),
      deadline_(call_deadline_.has_value()
                    ? std::chrono::system_clock::now() +
                          std::chrono::milliseconds(ctx->limits.default_deadline_ms)
                    : context->deadline()) {
  if (ctx_->shutting_down.load()) {
    finished_ = true;
    Finish(scope_.Complete(ShuttingDown()));
  } else {
    std::unique_lock<std::mutex> l(mu_);
    ArmWatchdogLocked();
    Settle(l);
  }
  HandedToGrpc(this);
}

void PutBlocksReactor::SetMessageBytes() {
  // A RAW chunk on the streaming encoder also fills its share of the packed block.
  message_bytes_ = kReadReserveBytes;
  if (streaming_encode_) {
    message_bytes_ += (kReadReserveBytes * ns_->codec.packed_bytes() + ns_->codec.raw_bytes() - 1) /
                      ns_->codec.raw_bytes();
  }
}

uint64_t PutBlocksReactor::PackedShare(uint64_t raw_received) const {
  const uint64_t raw = ns_->codec.raw_bytes();
  const uint64_t packed = ns_->codec.packed_bytes();
  // Both are at most 1 GiB (max_block_bytes): the product fits in 64 bits.
  return raw_received >= raw ? packed : raw_received * packed / raw;
}

void PutBlocksReactor::Charge(const BlockPtr& b, uint64_t bytes) {
  if (bytes <= reserve_left_) {
    reserve_left_ -= bytes;
  } else {
    lease_.Take(bytes - reserve_left_);
    held_bytes_ += bytes - reserve_left_;
    reserve_left_ = 0;
  }
  b->charge += bytes;
}

void PutBlocksReactor::ReleaseWindowLocked() {
  held_bytes_ -= reserve_left_;
  to_release_ += reserve_left_;
  reserve_left_ = 0;
}

void PutBlocksReactor::ArmWatchdogLocked() {
  if (watchdog_done_) return;
  const int idle = ctx_->limits.stream_idle_timeout_ms;
  if (idle == 0 && !call_deadline_.has_value()) return;
  const auto now = std::chrono::steady_clock::now();
  auto next = call_deadline_.value_or(CallWatchdog::Clock::time_point::max());
  if (idle != 0) {
    next = std::min(next, (read_pending_ ? read_since_ : now) + std::chrono::milliseconds(idle));
  }
  watch_ = ctx_->watchdog->Arm(next, [self = Ref(this)] { self->OnWatchdog(); });
}

void PutBlocksReactor::OnWatchdog() {
  std::unique_lock<std::mutex> l(mu_);
  watch_ = 0;
  if (watchdog_done_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  const int idle = ctx_->limits.stream_idle_timeout_ms;
  absl::Status why;
  if (call_deadline_.has_value() && now >= *call_deadline_) {
    ctx_->metrics->RecordDefaultDeadlineCancel();
    why = absl::DeadlineExceededError(
        absl::StrCat("the call set no deadline and ran past the server's default of ",
                     ctx_->limits.default_deadline_ms, " ms (--default-deadline-ms)"));
  } else if (idle != 0 && read_pending_ && now - read_since_ >= std::chrono::milliseconds(idle)) {
    ctx_->metrics->RecordStreamIdleTimeout();
    why = absl::CancelledError(absl::StrCat("the client sent nothing for ", idle,
                                            " ms (--stream-idle-timeout-ms); the stream was "
                                            "cancelled and its in-flight budget given back"));
  } else {
    ArmWatchdogLocked();
    return;
  }
  FailStream(why);
  l.unlock();
  // The pending read ends (ok = false) and OnCancel runs; the call finishes once its tasks
  // are done. Not after OnDone: then the context is gone.
  std::lock_guard<std::mutex> c(cancel_mu_);
  if (!grpc_done_) context_->TryCancel();
}

void PutBlocksReactor::OnDone() {
  InReaction(this);
  {
    std::lock_guard<std::mutex> c(cancel_mu_);
    grpc_done_ = true;
  }
  CallWatchdog::Handle h = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    watchdog_done_ = true;
    h = std::exchange(watch_, 0);
  }
  // The entry's reference is dropped here; gRPC's keeps the reactor alive.
  if (h != 0) (void)ctx_->watchdog->Disarm(h);
  ReleaseGrpcRef();
}

bool PutBlocksReactor::AllDeclaredBlocksIn() const {
  return declared_blocks_.has_value() && results_.size() >= *declared_blocks_ &&
         current_ == nullptr;
}

bool PutBlocksReactor::Abandoned() const {
  return abandoned_.load() || std::chrono::system_clock::now() > deadline_;
}

void PutBlocksReactor::OnReadDone(bool ok) {
  const ReactionScope reaction(this);
  std::unique_lock<std::mutex> l(mu_);
  try {
    read_pending_ = false;
    if (!ok) {
      reading_done_ = true;
      if (current_ != nullptr) {
        FailBlock(current_,
                  absl::InvalidArgumentError(absl::StrCat(
                      "stream ended after ", current_->received, " of ", current_->expected,
                      " bytes of block ", Hex(current_->hash), "; the block was not stored")));
        current_.reset();
      }
    } else if (AllDeclaredBlocksIn() && !(request_.offset() != 0 && skip_hash_.has_value() &&
                                          request_.block_hash() == *skip_hash_)) {
      // (The rest of a refused last block is dropped by HandleMessage.) Read without a
      // reservation; its bytes go with the request.
      FailStream(absl::InvalidArgumentError(
          absl::StrCat("the stream sent more than the ", *declared_blocks_,
                       " blocks its header's block_count declared")));
      request_.Clear();
    } else {
      HandleMessage(request_);
    }
    // The rest of the window stays for the next read, unless no read comes.
    if (reading_done_ || AllDeclaredBlocksIn()) ReleaseWindowLocked();
  } catch (...) {
    FailStream(CaughtException(ctx_, "PutBlocks OnReadDone", std::current_exception()));
  }
  Settle(l);
}

void PutBlocksReactor::OnCancel() {
  const ReactionScope reaction(this);
  std::unique_lock<std::mutex> l(mu_);
  abandoned_ = true;
  if (fatal_.ok()) fatal_ = absl::CancelledError("PutBlocks cancelled by the client");
  const bool waiting = waiting_budget_;
  l.unlock();
  const bool cancelled = waiting && lease_.Cancel();
  l.lock();
  if (cancelled) {
    waiting_budget_ = false;
    ticket_bytes_ = 0;
    reading_done_ = true;
  }
  // Also when neither reading nor waiting (paused, or between events): the call finishes
  // once its tasks are done; it used to wait for an event that a paused stream never gets.
  Settle(l);
}

void PutBlocksReactor::OnBudget(const absl::Status& status) {
  std::unique_lock<std::mutex> l(mu_);
  waiting_budget_ = false;
  const uint64_t granted = std::exchange(ticket_bytes_, 0);
  if (!status.ok()) {
    FailStream(status);
  } else if (fatal_.ok() && !reading_done_) {
    held_bytes_ += granted;
    reserve_left_ += granted;
    read_pending_ = true;
    read_since_ = std::chrono::steady_clock::now();
    l.unlock();
    HandedToGrpc(this);
    StartRead(&request_);
    return;
  } else {
    held_bytes_ += granted;  // held by the lease now: given back with the window
    reserve_left_ += granted;
    ReleaseWindowLocked();
  }
  Settle(l);
}

void PutBlocksReactor::HandleMessage(v1::PutBlocksRequest& req) {
  if (ns_ == nullptr) {
    absl::StatusOr<std::shared_ptr<const Namespace>> ns =
        ctx_->registry->Get(req.namespace_id(), caller_);
    if (!ns.ok()) {
      FailStream(ns.status());
      return;
    }
    ns_ = *std::move(ns);
    streaming_encode_ = ctx_->backend.cuda == nullptr;
    SetMessageBytes();
    if (req.has_header()) {
      // The stream's header (PutBlocksHeader, proto): only the first message may carry it.
      if (req.header().block_count() != 0) declared_blocks_ = req.header().block_count();
      chain_continues_ = req.header().chain_continues();
    }
  } else if (req.namespace_id() != ns_->id) {
    FailStream(absl::InvalidArgumentError(
        absl::StrCat("namespace_id ", absl::Hex(req.namespace_id(), absl::kZeroPad16),
                     " is not the stream's namespace ", absl::Hex(ns_->id, absl::kZeroPad16),
                     " (its first message's); one PutBlocks stream writes one namespace")));
    return;
  } else if (req.has_header()) {
    FailStream(absl::InvalidArgumentError(
        "a PutBlocks message after the stream's first carries a header; only the first may"));
    return;
  }
  const std::string& hash = req.block_hash();
  if (current_ != nullptr) {
    if (hash == current_->hash && req.offset() == current_->received) {
      AppendChunk(req);
      return;
    }
    if (req.offset() == 0) {
      FailBlock(current_,
                absl::InvalidArgumentError(absl::StrCat(
                    "block ", Hex(current_->hash), " ended after ", current_->received, " of ",
                    current_->expected, " bytes (the next block started); it was not stored")));
    } else {
      skip_hash_ = current_->hash;
      FailBlock(current_, absl::InvalidArgumentError(absl::StrCat(
                              "expected the chunk at offset ", current_->received, " of block ",
                              Hex(current_->hash), ", got offset ", req.offset(), " of block ",
                              Hex(hash), "; chunks of a block must arrive in order")));
    }
    current_.reset();
  }
  if (req.offset() != 0) {
    if (skip_hash_.has_value() && hash == *skip_hash_) return;  // rest of a rejected block
    skip_hash_ = hash;
    AddResult(hash, absl::InvalidArgumentError(
                        absl::StrCat("chunk at offset ", req.offset(), " of block ", Hex(hash),
                                     " arrived without the block's first chunk (offset 0)")));
    return;
  }
  skip_hash_.reset();
  StartBlock(req);
}

void PutBlocksReactor::StartBlock(v1::PutBlocksRequest& req) {
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
  if (s.ok()) s = CheckQuota();
  if (!s.ok()) {
    skip_hash_ = hash;
    AddResult(hash, s);
    return;
  }
  auto b = std::make_shared<Block>();
  b->index = AddResult(hash, absl::OkStatus());
  b->hash = hash;
  b->encoding = req.encoding();
  b->expected = expected;
  pending_.push_back(b);
  current_ = b;
  AppendChunk(req);
}

absl::Status PutBlocksReactor::CheckQuota() {
  if (ctx_->auth == nullptr) return absl::OkStatus();
  // The store keeps the tenant within its quota as blocks commit (evicting the tenant's own
  // blocks: block_store.h, "Tenants"); a block larger than the whole quota could never be
  // stored, so it is refused before its bytes are read.
  const uint64_t quota = ctx_->auth->QuotaBytes(caller_.tenant);
  const uint64_t block = ns_->codec.packed_bytes();
  if (quota == 0 || block <= quota) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("a block of this namespace is ", block,
                                                   " packed bytes, over this tenant's "
                                                   "quota of ",
                                                   quota, " bytes"));
}

void PutBlocksReactor::AppendChunk(v1::PutBlocksRequest& req) {
  BlockPtr b = current_;
  if ((req.block_bytes() != 0 && req.block_bytes() != b->expected) ||
      (req.encoding() != v1::ENCODING_UNSPECIFIED && req.encoding() != b->encoding)) {
    skip_hash_ = b->hash;
    FailBlock(b, absl::InvalidArgumentError(absl::StrCat(
                     "chunk at offset ", req.offset(), " of block ", Hex(b->hash),
                     " changes block_bytes or encoding from the block's first chunk")));
    current_.reset();
    return;
  }
  const uint64_t n = req.data().size();
  if (b->received + n > b->expected) {
    skip_hash_ = b->hash;
    FailBlock(b, absl::InvalidArgumentError(absl::StrCat("chunk at offset ", req.offset(), " with ",
                                                         n, " bytes overruns block ", Hex(b->hash),
                                                         " of block_bytes ", b->expected)));
    current_.reset();
    return;
  }
  // The chunk's bytes (and on the streaming encoder its share of the packed block) move from
  // the read window to the block.
  const bool streaming = b->encoding == v1::ENCODING_RAW && streaming_encode_;
  Charge(b, n + (streaming ? PackedShare(b->received + n) - PackedShare(b->received) : 0));
  b->received += n;
  std::string data = std::move(*req.mutable_data());  // no copy
  if (b->encoding == v1::ENCODING_RAW && streaming_encode_) {
    if (b->packed == nullptr) {
      b->packed_size = ns_->codec.packed_bytes();
      // Not zero-filled: every byte is written, its pages taken as the sections are encoded
      // (so the charge follows the chunks, above).
      b->packed.reset(new uint8_t[b->packed_size]);
    }
    FeedSections(b, std::move(data));
  } else if (b->data.empty()) {
    b->data = std::move(data);
  } else {
    b->data.append(data);
  }
  if (b->received == b->expected) {
    b->received_all = true;
    current_.reset();
    OnBlockReceived(b);
  }
}

void PutBlocksReactor::FeedSections(const BlockPtr& b, std::string data) {
  const size_t section = ns_->codec.section_raw_bytes();
  auto chunk = std::make_shared<const std::string>(std::move(data));
  size_t pos = 0;
  if (!b->carry.empty()) {
    pos = std::min(section - b->carry.size(), chunk->size());
    b->carry.append(chunk->data(), pos);
    if (b->carry.size() == section) {
      auto whole = std::make_shared<const std::string>(std::move(b->carry));
      b->carry = std::string();
      SpawnEncode(b, whole, 0, section, b->next_section++);
    }
  }
  size_t full = (chunk->size() - pos) / section;
  if (full > 0) {
    const size_t tasks = std::max<size_t>(1, full * section / kTaskBytes);
    const size_t per_task = (full + tasks - 1) / tasks;
    while (full > 0) {
      const size_t k = std::min(full, per_task);
      SpawnEncode(b, chunk, pos, k * section, b->next_section);
      b->next_section += k;
      pos += k * section;
      full -= k;
    }
  }
  if (pos < chunk->size()) b->carry.assign(chunk->data() + pos, chunk->size() - pos);
}

void PutBlocksReactor::SpawnEncode(const BlockPtr& b, std::shared_ptr<const std::string> data,
                                   size_t offset, size_t bytes, size_t first_section) {
  Spawn(b, [self = Ref(this), b, data = std::move(data), offset, bytes, first_section] {
    self->EncodeTask(b, data, offset, bytes, first_section);
  });
}

void PutBlocksReactor::Spawn(const BlockPtr& b, std::function<void()> task) {
  if (b->failed) return;
  ++b->tasks;
  ++tasks_;
  const bool queued =
      ctx_->pool->Submit(std::move(task), [self = Ref(this), b](const absl::Status& status) {
        std::unique_lock<std::mutex> l(self->mu_);
        self->ctx_->metrics->RecordInternalFailure();
        self->TaskDone(b, status);
        self->Settle(l);
      });
  if (!queued) {
    --b->tasks;
    --tasks_;
    FailBlock(b, PoolFull(*ctx_->pool));
  }
}

void PutBlocksReactor::OnBlockReceived(const BlockPtr& b) {
  if (b->failed) return;
  if (b->encoding == v1::ENCODING_RAW && streaming_encode_) {
    MaybeReady(b);  // (when every section was encoded already)
    return;
  }
  Spawn(b, [self = Ref(this), b] { self->WholeBlockTask(b); });
}

void PutBlocksReactor::EncodeTask(const BlockPtr& b, std::shared_ptr<const std::string> data,
                                  size_t offset, size_t bytes, size_t first_section) {
  absl::Status s;
  if (!Abandoned() && !b->dead.load()) {
    const auto start = std::chrono::steady_clock::now();
    s = ns_->codec.EncodeSections(Bytes(std::string_view(*data).substr(offset, bytes)),
                                  first_section, {b->packed.get(), b->packed_size},
                                  ctx_->backend.cpu_isa);
    ctx_->metrics->RecordCodec(CodecOp::kEncode, SecondsSince(start), bytes);
  }
  data.reset();  // the raw bytes are no longer needed
  std::unique_lock<std::mutex> l(mu_);
  TaskDone(b, s);
  Settle(l);
}

void PutBlocksReactor::WholeBlockTask(const BlockPtr& b) {
  absl::Status s;
  if (!Abandoned() && !b->dead.load()) {
    const auto start = std::chrono::steady_clock::now();
    if (b->encoding == v1::ENCODING_PACKED) {
      s = ValidatePackedBlock(*ns_, Bytes(b->data));
      ctx_->metrics->RecordCodec(CodecOp::kVerify, SecondsSince(start), b->data.size());
    } else {
      // The CUDA backend encodes whole blocks.
      auto packed = std::unique_ptr<uint8_t[]>(new uint8_t[ns_->codec.packed_bytes()]);
      const absl::Span<const uint8_t> raw = Bytes(b->data);
      const absl::Span<uint8_t> out(packed.get(), ns_->codec.packed_bytes());
      // EncodeBlocks records the codec metrics under the backend that ran.
      s = EncodeBlocks(ctx_->backend, ns_->codec, absl::MakeConstSpan(&raw, 1),
                       absl::MakeConstSpan(&out, 1))[0];
      std::unique_lock<std::mutex> l(mu_);
      b->packed = std::move(packed);
      b->packed_size = out.size();
      std::string().swap(b->data);
    }
  }
  std::unique_lock<std::mutex> l(mu_);
  TaskDone(b, s);
  Settle(l);
}

void PutBlocksReactor::TaskDone(const BlockPtr& b, const absl::Status& status) {
  --b->tasks;
  --tasks_;
  if (!status.ok() && !b->failed) FailBlock(b, status);
  MaybeReady(b);
}

void PutBlocksReactor::MaybeReady(const BlockPtr& b) {
  if (b->failed || !b->received_all || b->tasks != 0 || b->ready) return;
  if (b->encoding == v1::ENCODING_RAW && streaming_encode_) {
    ns_->codec.SealPacked({b->packed.get(), b->packed_size});
  }
  b->ready = true;
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

void PutBlocksReactor::FailBlock(const BlockPtr& b, const absl::Status& status) {
  if (b->failed) return;
  b->failed = true;
  b->dead = true;
  v1::BlockResult& r = results_[b->index];
  r.set_code(static_cast<int32_t>(status.code()));
  r.set_message(std::string(status.message()));
  held_bytes_ -= b->charge;
  to_release_ += b->charge;
  b->charge = 0;
  if (b->tasks == 0) {  // nobody touches the buffers any more
    b->packed.reset();
    std::string().swap(b->data);
    std::string().swap(b->carry);
  }
}

void PutBlocksReactor::FailStream(const absl::Status& status) {
  if (fatal_.ok()) fatal_ = status;
  reading_done_ = true;
  abandoned_ = true;
}

void PutBlocksReactor::MaybeCommit() {
  if (committing_ || !fatal_.ok()) return;
  std::vector<BlockPtr> batch;
  uint64_t bytes = 0;
  while (!pending_.empty() && bytes < kCommitBytes) {
    BlockPtr& b = pending_.front();
    if (b->failed) {
      pending_.pop_front();
      continue;
    }
    if (!b->ready) break;
    bytes += b->value().size();
    batch.push_back(std::move(b));
    pending_.pop_front();
  }
  if (batch.empty()) return;
  // Whether this commit holds the stream's last block: then that block is the request's last,
  // usually partly filled one, which the eviction policy values least (RequestInfo::
  // last_in_call); the last block of an earlier commit is not.
  const bool ends_request =
      pending_.empty() && current_ == nullptr && (reading_done_ || AllDeclaredBlocksIn());
  committing_ = true;
  ++tasks_;
  const bool queued = ctx_->io_pool->Submit(
      [self = Ref(this), batch, ends_request] { self->CommitTask(batch, ends_request); },
      [self = Ref(this), batch](const absl::Status& status) {
        std::unique_lock<std::mutex> l(self->mu_);
        self->ctx_->metrics->RecordInternalFailure();
        for (const BlockPtr& b : batch) self->FailBlock(b, status);
        self->committing_ = false;
        --self->tasks_;
        self->Settle(l);
      });
  if (!queued) {
    committing_ = false;
    --tasks_;
    for (const BlockPtr& b : batch) FailBlock(b, PoolFull(*ctx_->io_pool));
  }
}

void PutBlocksReactor::CommitTask(std::vector<BlockPtr> blocks, bool ends_request) {
  std::vector<absl::Status> statuses(blocks.size());
  if (Abandoned()) {
    std::fill(statuses.begin(), statuses.end(),
              absl::CancelledError("the call was cancelled before its blocks were stored"));
  } else {
    std::vector<BlockStore::BlockWrite> writes;
    writes.reserve(blocks.size());
    for (const BlockPtr& b : blocks) writes.push_back({b->hash, b->value()});
    chain_.call_ends_request = ends_request && !chain_continues_;
    statuses = ctx_->store->PutBlocks(ns_->id, writes, &chain_);
  }
  std::unique_lock<std::mutex> l(mu_);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockPtr& b = blocks[i];
    if (!statuses[i].ok()) {
      FailBlock(b, statuses[i]);
      continue;
    }
    results_[b->index].set_stored_bytes(b->value().size());
    held_bytes_ -= b->charge;
    to_release_ += b->charge;
    b->charge = 0;
    b->packed.reset();
    std::string().swap(b->data);
  }
  committing_ = false;
  --tasks_;
  Settle(l);
}

void PutBlocksReactor::Settle(std::unique_lock<std::mutex>& l) {
  // A stream that failed as a whole (or was cancelled) reads no more, even when it was paused.
  if (!fatal_.ok() && !read_pending_) reading_done_ = true;
  MaybeCommit();
  bool start_read = false;
  if (!reading_done_ && fatal_.ok() && !read_pending_ && !waiting_budget_ && !finished_) {
    if (AllDeclaredBlocksIn()) {
      ReleaseWindowLocked();
      read_pending_ = true;  // every declared block is in: only the end of the stream comes
      start_read = true;
    } else if (held_bytes_ >= kStreamWindowBytes && current_ == nullptr) {
      // Between blocks only: a block is read to its end whatever its size (at most
      // --max-block-bytes), since only whole blocks are committed and resume a paused stream.
      paused_ = true;  // a commit resumes reading
      ReleaseWindowLocked();
    } else if (reserve_left_ >= message_bytes_) {
      paused_ = false;
      read_pending_ = true;  // the window has room for the next message
      start_read = true;
    } else {
      paused_ = false;
      // Tops the window up. Mid-block too: a stream that holds part of a block while the
      // budget is spent is let through by the budget's progress rule once every holder waits
      // (byte_budget.h), so blocks larger than the budget, or than the tenant's share, go
      // through one at a time instead of all waiting out the admission timeout.
      const uint64_t want = std::max(kReadWindowBytes, message_bytes_) - reserve_left_;
      if (lease_.Acquire(
              want, std::chrono::milliseconds(ctx_->limits.admission_timeout_ms),
              [self = Ref(this)](const absl::Status& status) { self->OnBudget(status); })) {
        held_bytes_ += want;
        reserve_left_ += want;
        read_pending_ = true;
        start_read = true;
      } else {
        waiting_budget_ = true;
        ticket_bytes_ = want;
      }
    }
    if (start_read) read_since_ = std::chrono::steady_clock::now();
  }
  bool finish = false;
  if (!finished_ && reading_done_ && !read_pending_ && !waiting_budget_ && tasks_ == 0 &&
      !committing_ && (pending_.empty() || !fatal_.ok())) {
    finished_ = true;
    finish = true;
    pending_.clear();
    current_.reset();
    to_release_ += held_bytes_;
    held_bytes_ = 0;
    reserve_left_ = 0;
  }
  const uint64_t release = to_release_;
  to_release_ = 0;
  l.unlock();
  if (release != 0) lease_.Release(release);
  if (start_read) {
    HandedToGrpc(this);
    StartRead(&request_);
  }
  if (finish) FinishNow();
}

void PutBlocksReactor::FinishNow() {
  // Only one thread gets here (finished_ was set under mu_); nothing else touches the state.
  if (!fatal_.ok()) {
    const grpc::Status status = scope_.Complete(fatal_);
    HandedToGrpc(this);
    Finish(status);
    return;
  }
  for (v1::BlockResult& r : results_) {
    ctx_->metrics->RecordPutBlock(static_cast<absl::StatusCode>(r.code()));
    *response_->add_results() = std::move(r);
  }
  const grpc::Status status = scope_.Complete(absl::OkStatus());
  HandedToGrpc(this);
  Finish(status);
}

}  // namespace turbokv::server
