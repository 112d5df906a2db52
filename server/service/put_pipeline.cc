#include "server/service/put_pipeline.h"

#include <algorithm>
#include <cstring>
#include <utility>

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

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

absl::Span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string RawLayout(const codec::BlockShape& sh) {
  return absl::StrCat("[", sh.num_layers, "][2][", sh.block_tokens, "][", sh.num_kv_heads, "][",
                      sh.head_dim, "] of ", std::string(codec::DTypeName(sh.dtype)));
}

}  // namespace

struct PutPipeline::Block {
  size_t index = 0;  // position in results_
  std::string hash;
  v1::Encoding encoding = v1::ENCODING_UNSPECIFIED;
  // RAW: the packed block, written by the encode tasks (uninitialized until then).
  std::unique_ptr<uint8_t[]> packed;
  size_t packed_size = 0;
  std::string carry;        // streaming RAW: the start of a section split across chunks
  size_t next_section = 0;  // streaming RAW: first section not handed to a task yet
  std::string data;         // PACKED, and RAW on the CUDA backend: the reassembled block
  // Pool tasks of this block in flight. Taken under mu_; a task gives its unit back without
  // the lock and only the last one (or a failed one) takes mu_: one lock per block, not per task.
  std::atomic<int> tasks{0};
  bool received_all = false;
  bool ready = false;             // encoded / validated and sealed: may be committed
  bool failed = false;            // has its (non-OK) result; dropped
  BudgetShare charge;             // the budget its bytes hold, until committed or dropped
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

PutPipeline::PutPipeline(PipelineEnv env, Call call, Host* host)
    : env_(std::move(env)),
      call_(std::move(call)),
      host_(host),
      message_bytes_(kReadReserveBytes) {}

void PutPipeline::Start(const absl::Status& refused) {
  Lock l(mu_);
  if (!refused.ok()) {
    FailStream(refused);
  } else {
    ArmTimerLocked();
  }
  Settle(l);
}

bool PutPipeline::Abandoned() const {
  return abandoned_.load() || std::chrono::system_clock::now() > call_.deadline;
}

uint64_t PutPipeline::PackedShare(uint64_t raw_received) const {
  const uint64_t raw = ns_->codec.raw_bytes();
  const uint64_t packed = ns_->codec.packed_bytes();
  // Both are at most 1 GiB (max_block_bytes): the product fits in 64 bits.
  return raw_received >= raw ? packed : raw_received * packed / raw;
}

uint64_t PutPipeline::HeldLocked() const {
  uint64_t dropped = 0;
  for (const BudgetShare& s : drop_) dropped += s.bytes();
  dropped += releasing_;  // swapped out of drop_ by a Settle that has not given them back yet
  return call_.lease.held() - std::min(dropped, call_.lease.held());
}

void PutPipeline::Charge(const BlockPtr& b, uint64_t bytes) {
  BudgetShare share = window_.Split(bytes);
  if (share.bytes() < bytes) share.Absorb(call_.lease.Take(bytes - share.bytes()));
  if (b->failed) {
    drop_.push_back(std::move(share));  // the rest of a dropped block: read, not kept
  } else {
    b->charge.Absorb(std::move(share));
  }
}

void PutPipeline::ArmTimerLocked() {
  const int idle = env_.limits.stream_idle_timeout_ms;
  if (idle == 0 && !call_.default_deadline.has_value()) return;
  const auto now = std::chrono::steady_clock::now();
  auto next = call_.default_deadline.value_or(std::chrono::steady_clock::time_point::max());
  if (idle != 0) {
    next = std::min(next, (read_pending_ ? read_since_ : now) + std::chrono::milliseconds(idle));
  }
  host_->ArmTimer(next);
}

void PutPipeline::OnTimer() {
  Lock l(mu_);
  if (finished_) return;
  const auto now = std::chrono::steady_clock::now();
  const int idle = env_.limits.stream_idle_timeout_ms;
  absl::Status why;
  if (call_.default_deadline.has_value() && now >= *call_.default_deadline) {
    env_.metrics->RecordDefaultDeadlineCancel();
    why = absl::DeadlineExceededError(
        absl::StrCat("the call set no deadline and ran past the server's default of ",
                     env_.limits.default_deadline_ms, " ms (--default-deadline-ms)"));
  } else if (idle != 0 && read_pending_ && now - read_since_ >= std::chrono::milliseconds(idle)) {
    env_.metrics->RecordStreamIdleTimeout();
    why = absl::CancelledError(absl::StrCat("the client sent nothing for ", idle,
                                            " ms (--stream-idle-timeout-ms); the stream was "
                                            "cancelled and its in-flight budget given back"));
  } else {
    ArmTimerLocked();
    return;
  }
  FailStream(why);
  l.unlock();
  // The pending read ends (ok = false) and OnCancel comes; the call finishes once its tasks
  // are done.
  host_->Cancel();
}

void PutPipeline::OnRead(bool ok) {
  Lock l(mu_);
  read_pending_ = false;
  if (!ok) {
    reading_done_ = true;
    if (assembler_.has_value()) {
      if (std::optional<ChunkAssembler::Step::Cut> cut = assembler_->End(); cut.has_value()) {
        FailBlock(cut->block_index, cut->status);
      }
    }
  } else {
    Assemble(request_);
  }
  Settle(l);
}

void PutPipeline::OnError(const absl::Status& status) {
  Lock l(mu_);
  read_pending_ = false;
  FailStream(status);
  Settle(l);
}

void PutPipeline::OnCancel() {
  Lock l(mu_);
  abandoned_ = true;
  if (fatal_.ok()) fatal_ = absl::CancelledError("PutBlocks cancelled by the client");
  const bool waiting = waiting_budget_;
  l.unlock();
  const bool cancelled = waiting && call_.lease.Cancel();
  l.lock();
  if (cancelled) {
    waiting_budget_ = false;
    reading_done_ = true;
  }
  // Also when neither reading nor waiting (held back, or between events): the call finishes
  // once its tasks are done.
  Settle(l);
}

void PutPipeline::OnBudget(const absl::Status& status, uint64_t bytes) {
  Lock l(mu_);
  waiting_budget_ = false;
  if (!status.ok()) {
    FailStream(status);
  } else {
    window_.Absorb(call_.lease.Granted(bytes));
    if (fatal_.ok() && !reading_done_) {
      read_pending_ = true;
      read_since_ = std::chrono::steady_clock::now();
      l.unlock();
      host_->StartRead(&request_);
      return;
    }
    drop_.push_back(std::move(window_));  // no read comes
  }
  Settle(l);
}

void PutPipeline::Assemble(v1::PutBlocksRequest& msg) {
  if (!assembler_.has_value()) {
    absl::StatusOr<std::shared_ptr<const Namespace>> ns = call_.resolve(msg.namespace_id());
    if (!ns.ok()) {
      FailStream(ns.status());
      return;
    }
    ns_ = *std::move(ns);
    streaming_encode_ = env_.backend->cuda == nullptr;
    // A RAW chunk on the streaming encoder also fills its share of the packed block.
    if (streaming_encode_) {
      message_bytes_ +=
          (kReadReserveBytes * ns_->codec.packed_bytes() + ns_->codec.raw_bytes() - 1) /
          ns_->codec.raw_bytes();
    }
    assembler_.emplace(BlockSizes{ns_->id, ns_->codec.raw_bytes(), ns_->codec.packed_bytes(),
                                  RawLayout(ns_->codec.shape()), call_.quota_bytes},
                       msg);
  }
  ChunkAssembler::Step step;
  if (absl::Status s = assembler_->Accept(msg, &step); !s.ok()) {
    FailStream(s);
    msg.Clear();
    return;
  }
  if (step.cut.has_value()) FailBlock(step.cut->block_index, step.cut->status);
  if (step.result.has_value()) {
    AddResult(step.result_hash, *step.result);
    if (step.result->ok()) {
      auto b = std::make_shared<Block>();
      b->index = step.result_index;
      b->hash = step.result_hash;
      b->encoding = step.encoding;
      pending_.push_back(b);
      current_ = b;
    }
  }
  if (!step.chunk) return;
  const BlockPtr b = current_;
  const uint64_t n = step.data.size();
  // The chunk's bytes (and on the streaming encoder its share of the packed block) move from
  // the read window to the block.
  const bool streaming = b->encoding == v1::ENCODING_RAW && streaming_encode_;
  Charge(b, n + (streaming ? PackedShare(step.offset + n) - PackedShare(step.offset) : 0));
  if (streaming) {
    if (b->packed == nullptr) {
      b->packed_size = ns_->codec.packed_bytes();
      // Not zero-filled: every byte is written, its pages taken as the sections are encoded
      // (so the charge follows the chunks, above).
      b->packed.reset(new uint8_t[b->packed_size]);
    }
    FeedSections(b, std::move(step.data));
  } else if (b->data.empty()) {
    b->data = std::move(step.data);
  } else {
    b->data.append(step.data);
  }
  if (step.completes) {
    b->received_all = true;
    current_.reset();
    OnBlockReceived(b);
  }
}

void PutPipeline::AddResult(const std::string& hash, const absl::Status& status) {
  v1::BlockResult& r = results_.emplace_back();
  // Echo the hash; a malformed overlong one only in part (results are matched by position).
  r.set_block_hash(hash.size() <= 2 * kMaxBlockHashBytes ? hash
                                                         : hash.substr(0, 2 * kMaxBlockHashBytes));
  r.set_code(static_cast<int32_t>(status.code()));
  r.set_message(std::string(status.message()));
}

void PutPipeline::FeedSections(const BlockPtr& b, std::string data) {
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

void PutPipeline::SpawnEncode(const BlockPtr& b, std::shared_ptr<const std::string> data,
                              size_t offset, size_t bytes, size_t first_section) {
  Spawn(b, [this, b, data = std::move(data), offset, bytes, first_section] {
    EncodeTask(b, data, offset, bytes, first_section);
  });
}

void PutPipeline::Spawn(const BlockPtr& b, std::function<void()> task) {
  if (b->failed) return;
  if (b->tasks.fetch_add(1, std::memory_order_relaxed) == 0) ++tasks_;  // tasks_ counts blocks
  std::shared_ptr<void> pin = host_->Pin();
  absl::Status queued = env_.codec([pin, task = std::move(task)] { task(); },
                                   [this, pin, b](const absl::Status& status) {
                                     env_.metrics->RecordInternalFailure();
                                     TaskDone(b, status);
                                   });
  if (!queued.ok()) {
    if (b->tasks.fetch_sub(1, std::memory_order_relaxed) == 1) --tasks_;
    FailBlock(b, queued);
  }
}

void PutPipeline::OnBlockReceived(const BlockPtr& b) {
  if (b->failed) return;
  if (b->encoding == v1::ENCODING_RAW && streaming_encode_) {
    MaybeReady(b);  // (when every section was encoded already)
    return;
  }
  Spawn(b, [this, b] { WholeBlockTask(b); });
}

absl::Status PutPipeline::SkippedTaskStatus(bool abandoned) {
  // A task skipped because the call is over must not leave its block looking encoded (or, for
  // PACKED, validated): it fails the block. One skipped because its block already failed (or
  // another task of it is failing and will record why) reports nothing of its own.
  if (abandoned) return absl::CancelledError("the call ended before the block was encoded");
  return absl::OkStatus();
}

void PutPipeline::EncodeTask(const BlockPtr& b, std::shared_ptr<const std::string> data,
                             size_t offset, size_t bytes, size_t first_section) {
  const bool abandoned = Abandoned();  // read once: the deadline may pass in between
  absl::Status s = SkippedTaskStatus(abandoned);
  if (!abandoned && !b->dead.load()) {
    const auto start = std::chrono::steady_clock::now();
    s = ns_->codec.EncodeSections(Bytes(std::string_view(*data).substr(offset, bytes)),
                                  first_section, {b->packed.get(), b->packed_size},
                                  env_.backend->cpu_isa);
    env_.metrics->RecordCodec(CodecOp::kEncode, SecondsSince(start), bytes);
  }
  data.reset();  // the raw bytes are no longer needed
  TaskDone(b, s);
}

void PutPipeline::WholeBlockTask(const BlockPtr& b) {
  const bool abandoned = Abandoned();  // read once: the deadline may pass in between
  absl::Status s = SkippedTaskStatus(abandoned);
  if (!abandoned && !b->dead.load()) {
    const auto start = std::chrono::steady_clock::now();
    if (b->encoding == v1::ENCODING_PACKED) {
      s = ValidatePackedBlock(*ns_, Bytes(b->data));
      env_.metrics->RecordCodec(CodecOp::kVerify, SecondsSince(start), b->data.size());
    } else {
      // The CUDA backend encodes whole blocks.
      auto packed = std::unique_ptr<uint8_t[]>(new uint8_t[ns_->codec.packed_bytes()]);
      const absl::Span<const uint8_t> raw = Bytes(b->data);
      const absl::Span<uint8_t> out(packed.get(), ns_->codec.packed_bytes());
      // EncodeBlocks records the codec metrics under the backend that ran.
      s = EncodeBlocks(*env_.backend, ns_->codec, absl::MakeConstSpan(&raw, 1),
                       absl::MakeConstSpan(&out, 1))[0];
      Lock l(mu_);
      b->packed = std::move(packed);
      b->packed_size = out.size();
      std::string().swap(b->data);
    }
  }
  TaskDone(b, s);
}

void PutPipeline::TaskDone(const BlockPtr& b, const absl::Status& status) {
  // A failed task marks the block dead before it gives its unit back: the task that ends last
  // (maybe a successful one that takes mu_ first) must not seal and commit a block whose
  // failed sections were never written, nor may FailBlock free buffers a commit reads.
  if (!status.ok()) b->dead.store(true);
  // acq_rel: the last task sees every other task's sections (it seals them, under mu_).
  const bool last = b->tasks.fetch_sub(1, std::memory_order_acq_rel) == 1;
  if (!last && status.ok()) return;
  Lock l(mu_);
  if (last) --tasks_;
  if (!status.ok() && !b->failed) FailBlock(b, status);
  MaybeReady(b);
  Settle(l);
}

void PutPipeline::MaybeReady(const BlockPtr& b) {
  if (b->failed || b->dead.load() || !b->received_all ||
      b->tasks.load(std::memory_order_acquire) != 0 || b->ready) {
    return;
  }
  if (b->encoding == v1::ENCODING_RAW && streaming_encode_) {
    ns_->codec.SealPacked({b->packed.get(), b->packed_size});
  }
  b->ready = true;
}

void PutPipeline::FailBlock(size_t index, const absl::Status& status) {
  // Only the block being received is cut short by the assembler.
  if (current_ != nullptr && current_->index == index) {
    const BlockPtr b = std::move(current_);
    FailBlock(b, status);
  }
}

void PutPipeline::FailBlock(const BlockPtr& b, const absl::Status& status) {
  if (b->failed) return;
  b->failed = true;
  b->dead = true;
  v1::BlockResult& r = results_[b->index];
  r.set_code(static_cast<int32_t>(status.code()));
  r.set_message(std::string(status.message()));
  drop_.push_back(std::move(b->charge));
  if (b->tasks.load(std::memory_order_acquire) == 0) {  // nobody touches the buffers any more
    b->packed.reset();
    std::string().swap(b->data);
    std::string().swap(b->carry);
  }
}

void PutPipeline::FailStream(const absl::Status& status) {
  if (fatal_.ok()) fatal_ = status;
  reading_done_ = true;
  abandoned_ = true;
}

void PutPipeline::MaybeCommit() {
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
  const bool ends_request = pending_.empty() && current_ == nullptr &&
                            (reading_done_ || assembler_->all_declared_in()) &&
                            !assembler_->chain_continues();
  committing_ = true;
  ++tasks_;
  std::shared_ptr<void> pin = host_->Pin();
  absl::Status queued =
      env_.io([this, pin, batch, ends_request] { CommitTask(batch, ends_request); },
              [this, pin, batch](const absl::Status& status) {
                Lock l(mu_);
                env_.metrics->RecordInternalFailure();
                for (const BlockPtr& b : batch) FailBlock(b, status);
                committing_ = false;
                --tasks_;
                Settle(l);
              });
  if (!queued.ok()) {
    committing_ = false;
    --tasks_;
    for (const BlockPtr& b : batch) FailBlock(b, queued);
  }
}

void PutPipeline::CommitTask(std::vector<BlockPtr> blocks, bool ends_request) {
  std::vector<absl::Status> statuses(blocks.size());
  if (Abandoned()) {
    std::fill(statuses.begin(), statuses.end(),
              absl::CancelledError("the call was cancelled before its blocks were stored"));
  } else {
    std::vector<BlockStore::BlockWrite> writes;
    writes.reserve(blocks.size());
    for (const BlockPtr& b : blocks) writes.push_back({b->hash, b->value()});
    chain_.call_ends_request = ends_request;
    statuses = env_.commit(ns_->id, writes, &chain_);
  }
  Lock l(mu_);
  for (size_t i = 0; i < blocks.size(); ++i) {
    const BlockPtr& b = blocks[i];
    if (!statuses[i].ok()) {
      FailBlock(b, statuses[i]);
      continue;
    }
    results_[b->index].set_stored_bytes(b->value().size());
    drop_.push_back(std::move(b->charge));
    b->packed.reset();
    std::string().swap(b->data);
  }
  committing_ = false;
  --tasks_;
  Settle(l);
}

void PutPipeline::Settle(Lock& l) {
  // A stream that failed as a whole (or was cancelled) reads no more, even when held back.
  if (!fatal_.ok() && !read_pending_) reading_done_ = true;
  if (reading_done_ && window_.bytes() != 0) drop_.push_back(std::move(window_));  // no read comes
  MaybeCommit();
  bool start_read = false;
  if (!reading_done_ && fatal_.ok() && !read_pending_ && !waiting_budget_ && !finished_) {
    if (assembler_.has_value() && assembler_->all_declared_in()) {
      drop_.push_back(std::move(window_));
      read_pending_ = true;  // every declared block is in: only the end of the stream comes
      start_read = true;
    } else if (current_ == nullptr && HeldLocked() >= kStreamWindowBytes) {
      // Between blocks only: a block is read to its end whatever its size (at most
      // --max-block-bytes), since only whole blocks are committed and resume a held-back
      // stream. A commit resumes reading.
      drop_.push_back(std::move(window_));
    } else if (window_.bytes() >= message_bytes_) {
      read_pending_ = true;  // the window has room for the next message
      start_read = true;
    } else {
      // Tops the window up. Mid-block too: a stream that holds part of a block while the
      // budget is spent is let through by the budget's progress rule once every holder waits
      // (byte_budget.h), so blocks larger than the budget, or than the tenant's share, go
      // through one at a time instead of all waiting out the admission timeout.
      const uint64_t want = std::max(kReadWindowBytes, message_bytes_) - window_.bytes();
      if (call_.lease.Acquire(want, std::chrono::milliseconds(env_.limits.admission_timeout_ms),
                              [this, pin = host_->Pin(), want](const absl::Status& status) {
                                OnBudget(status, want);
                              })) {
        window_.Absorb(call_.lease.Granted(want));
        read_pending_ = true;
        start_read = true;
      } else {
        waiting_budget_ = true;
      }
    }
    if (start_read) read_since_ = std::chrono::steady_clock::now();
  }
  bool finish = false;
  absl::Status status;
  std::vector<v1::BlockResult> results;
  if (!finished_ && reading_done_ && !read_pending_ && !waiting_budget_ && tasks_ == 0 &&
      !committing_ && (pending_.empty() || !fatal_.ok())) {
    finished_ = true;
    finish = true;
    for (const BlockPtr& b : pending_) drop_.push_back(std::move(b->charge));
    pending_.clear();
    current_.reset();
    drop_.push_back(std::move(window_));
    status = fatal_;
    if (status.ok()) results = std::move(results_);
  }
  ShareBin drop;
  drop.swap(drop_);
  uint64_t releasing = 0;
  for (const BudgetShare& s : drop) releasing += s.bytes();
  // Until they are given back the lease still counts them: another thread's Settle must not
  // see them as held (it would hold the stream back with nothing left to resume it).
  releasing_ += releasing;
  l.unlock();
  drop.clear();  // gives the bytes back: their waiters' callbacks may run here
  if (releasing != 0) {
    l.lock();
    releasing_ -= releasing;
    l.unlock();
  }
  if (start_read) host_->StartRead(&request_);
  if (finish) {
    for (const v1::BlockResult& r : results) {
      env_.metrics->RecordPutBlock(static_cast<absl::StatusCode>(r.code()));
    }
    host_->Finish(status, std::move(results));
  }
}

}  // namespace turbokv::server
