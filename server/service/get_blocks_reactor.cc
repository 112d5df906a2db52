#include "server/service/get_blocks_reactor.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "server/service/wire_format.h"

namespace turbokv::server {
namespace {

// One fetch reads at most this many blocks / this many output bytes; the next fetch starts
// once fewer than kRefillBytes are waiting to be written.
constexpr size_t kFetchBlocks = 32;
constexpr size_t kFetchBytes = size_t{32} << 20;
constexpr size_t kRefillBytes = size_t{8} << 20;

}  // namespace

struct GetBlocksReactor::Batch {
  struct Message {
    v1::GetBlocksResponse fields;  // all but `data`
    Payload data;
  };
  std::vector<Message> messages;    // in request order
  std::vector<PinnedValue> values;  // RAW: the packed blocks being decoded
  size_t next_message = 0;          // first one not handed to the writer
  int decodes = 0;                  // decode tasks in flight
};

GetBlocksReactor::GetBlocksReactor(ServiceContext* ctx, grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request, Principal caller)
    : ctx_(ctx),
      caller_(std::move(caller)),
      scope_(ctx, RpcMethod::kGetBlocks),
      context_(context),
      lease_(ctx->budget, caller_.tenant),
      call_deadline_(DefaultDeadline(*ctx, *context)),
      deadline_(call_deadline_.has_value()
                    ? std::chrono::system_clock::now() +
                          std::chrono::milliseconds(ctx->limits.default_deadline_ms)
                    : context->deadline()) {
  absl::Status s = ctx_->shutting_down.load()
                       ? ShuttingDown()
                       : Guarded(ctx_, "GetBlocks Prepare", [&] { return Prepare(request); });
  if (!s.ok() || request_.block_hashes().empty()) {
    finished_ = true;
    Finish(scope_.Complete(s));
  } else {
    std::unique_lock<std::mutex> l(mu_);
    if (call_deadline_.has_value()) {
      watch_ = ctx_->watchdog->Arm(*call_deadline_, [self = Ref(this)] { self->OnWatchdog(); });
    }
    Pump(l);
  }
  HandedToGrpc(this);
}

void GetBlocksReactor::OnWatchdog() {
  {
    std::lock_guard<std::mutex> l(mu_);
    watch_ = 0;
    if (watchdog_done_ || finished_) return;
    ctx_->metrics->RecordDefaultDeadlineCancel();
    Fail(absl::DeadlineExceededError(
        absl::StrCat("the call set no deadline and ran past the server's default of ",
                     ctx_->limits.default_deadline_ms, " ms (--default-deadline-ms)")));
  }
  // A write the client does not read ends (ok = false) and the call finishes; not after
  // OnDone, when the context is gone.
  std::lock_guard<std::mutex> c(cancel_mu_);
  if (!grpc_done_) context_->TryCancel();
}

absl::Status GetBlocksReactor::Prepare(const grpc::ByteBuffer* request) {
  grpc::ByteBuffer wire(*request);  // shares the slices; Deserialize consumes its argument
  if (!grpc::SerializationTraits<v1::GetBlocksRequest>::Deserialize(&wire, &request_).ok()) {
    return absl::InvalidArgumentError("the request is not a GetBlocksRequest");
  }
  absl::StatusOr<std::shared_ptr<const Namespace>> ns =
      ctx_->registry->Get(request_.namespace_id(), caller_);
  if (!ns.ok()) return ns.status();
  ns_ = *std::move(ns);
  if (absl::Status s = CheckHashCount(*ctx_, request_.block_hashes_size()); !s.ok()) return s;
  for (int i = 0; i < request_.block_hashes_size(); ++i) {
    absl::Status s = ValidateBlockHash(request_.block_hashes(i));
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("block_hashes[", i, "]: ", s.message()));
    }
  }
  encoding_ = request_.encoding();
  if (encoding_ == v1::ENCODING_PACKED) return absl::OkStatus();
  if (encoding_ != v1::ENCODING_RAW) {
    return absl::InvalidArgumentError("encoding must be ENCODING_RAW or ENCODING_PACKED");
  }
  switch (request_.dtype()) {
    case v1::DTYPE_UNSPECIFIED:
      out_dtype_ = ns_->codec.shape().dtype;
      break;
    case v1::DTYPE_FP16:
    case v1::DTYPE_BF16:
    case v1::DTYPE_FP32:
      out_dtype_ = static_cast<codec::DType>(request_.dtype());
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", static_cast<int>(request_.dtype()), " is not a known DType"));
  }
  const uint32_t layers = static_cast<uint32_t>(ns_->codec.shape().num_layers);
  const uint32_t end = request_.layer_end() == 0 ? layers : request_.layer_end();
  if (end > layers || request_.layer_begin() >= end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer range [", request_.layer_begin(), ", ", request_.layer_end(),
        ") is not within the namespace's ", layers, " layers (layer_end 0 = num_layers)"));
  }
  range_.begin = static_cast<int>(request_.layer_begin());
  range_.end = static_cast<int>(end);
  absl::StatusOr<size_t> bytes = ns_->codec.DecodedBytes(out_dtype_, range_);
  if (!bytes.ok()) return bytes.status();
  decoded_bytes_ = *bytes;
  layer_bytes_ = decoded_bytes_ / static_cast<size_t>(range_.end - range_.begin);
  return absl::OkStatus();
}

bool GetBlocksReactor::Abandoned() const {
  return abandoned_.load() || std::chrono::system_clock::now() > deadline_;
}

void GetBlocksReactor::Fail(const absl::Status& status) {
  if (error_.ok()) error_ = status;
  abandoned_ = true;
}

bool GetBlocksReactor::Fetch(size_t begin, size_t count, uint64_t reserved, bool cache_only) {
  auto batch = std::make_shared<Batch>();
  struct Job {
    size_t block;
    uint32_t index;
    char* out;
    int layer_begin, layer_end;
  };
  std::vector<Job> jobs;
  absl::Status error;
  uint64_t found = 0;
  uint64_t bytes = 0;
  if (!Abandoned()) {
    std::vector<std::string_view> hashes;
    hashes.reserve(count);
    for (size_t i = begin; i < begin + count; ++i) hashes.push_back(request_.block_hashes(i));
    bool would_block = false;
    absl::StatusOr<std::vector<std::optional<PinnedValue>>> values;
    if (cache_only) {
      // Never throws into gRPC's thread: anything unusual goes the I/O pool's way.
      try {
        values = ctx_->store->GetPinnedBlocks(ns_->id, hashes, &would_block, &chain_);
      } catch (...) {
        return false;
      }
      if (would_block || !values.ok()) return false;
    } else {
      values = ctx_->store->GetPinnedBlocks(ns_->id, hashes, nullptr, &chain_);
    }
    if (!values.ok()) error = values.status();
    ctx_->metrics->RecordGetBlocksRead(cache_only);
    for (size_t j = 0; error.ok() && j < count; ++j) {
      const auto index = static_cast<uint32_t>(begin + j);
      std::optional<PinnedValue>& value = (*values)[j];
      // One message: `size` bytes of `owner` at `at`, at byte `offset` of the block.
      auto chunk = [&](uint64_t block_bytes, uint64_t offset,
                       const std::shared_ptr<const void>& owner, const char* at, size_t size) {
        Batch::Message& m = batch->messages.emplace_back();
        m.fields.set_index(index);
        m.fields.set_block_hash(request_.block_hashes(index));
        m.fields.set_found(true);
        m.fields.set_encoding(encoding_);
        if (encoding_ == v1::ENCODING_RAW) {
          m.fields.set_dtype(static_cast<v1::DType>(out_dtype_));
        }
        m.fields.set_block_bytes(block_bytes);
        m.fields.set_offset(offset);
        m.data = Payload{owner, at, size};
      };
      if (!value.has_value()) {
        Batch::Message& m = batch->messages.emplace_back();
        m.fields.set_index(index);
        m.fields.set_block_hash(request_.block_hashes(index));
        m.fields.set_found(false);
        continue;
      }
      ++found;
      if (encoding_ == v1::ENCODING_PACKED) {
        const std::string_view stored = value->bytes;  // pinned in RocksDB: no copy
        bytes += stored.size();
        for (size_t off = 0; off < stored.size() || off == 0; off += kMaxResponseChunkBytes) {
          chunk(stored.size(), off, value->owner, stored.data() + off,
                std::min(kMaxResponseChunkBytes, stored.size() - off));
        }
        continue;
      }
      // RAW: the block decodes into one buffer that is never zero-filled (every byte of it is
      // written by a decode task before any message is sent); whole layers per message, a
      // layer over 1 MiB spreads over several messages.
      const size_t block = batch->values.size();
      batch->values.push_back(std::move(*value));
      bytes += decoded_bytes_;
      const std::shared_ptr<char[]> decoded(new char[decoded_bytes_]);
      const int per_message =
          static_cast<int>(std::max<size_t>(1, kMaxResponseChunkBytes / layer_bytes_));
      for (int l = range_.begin; l < range_.end; l += per_message) {
        const int l_end = std::min(range_.end, l + per_message);
        const size_t offset = static_cast<size_t>(l - range_.begin) * layer_bytes_;
        const size_t size = static_cast<size_t>(l_end - l) * layer_bytes_;
        for (size_t off = 0; off < size; off += kMaxResponseChunkBytes) {
          chunk(decoded_bytes_, offset + off, decoded, decoded.get() + offset + off,
                std::min(kMaxResponseChunkBytes, size - off));
        }
        jobs.push_back({block, index, decoded.get() + offset, l, l_end});
      }
    }
  }
  ctx_->metrics->RecordGetBlocks(found, count - found);

  std::unique_lock<std::mutex> l(mu_);
  --tasks_;
  fetching_ = false;
  next_ = begin + count;
  if (bytes < reserved) {
    to_release_ += reserved - bytes;
    held_bytes_ -= reserved - bytes;
  } else if (bytes > reserved) {
    lease_.Take(bytes - reserved);
    held_bytes_ += bytes - reserved;
  }
  if (!error.ok()) Fail(error);
  if (error_.ok() && !Abandoned()) {
    batches_.push_back(batch);
    for (const Job& j : jobs) {
      ++tasks_;
      ++batch->decodes;
      const bool queued = ctx_->pool->Submit(
          [self = Ref(this), batch, j] {
            self->DecodeTask(batch, j.block, j.index, j.out, j.layer_begin, j.layer_end);
          },
          [self = Ref(this), batch](const absl::Status& status) {
            std::unique_lock<std::mutex> l2(self->mu_);
            self->ctx_->metrics->RecordInternalFailure();
            --self->tasks_;
            --batch->decodes;
            self->Fail(status);
            self->Pump(l2);
          });
      if (!queued) {
        --tasks_;
        --batch->decodes;
        Fail(PoolFull(*ctx_->pool));
        break;
      }
    }
  }
  Pump(l);
  return true;
}

void GetBlocksReactor::DecodeTask(const std::shared_ptr<Batch>& batch, size_t block, uint32_t index,
                                  char* out, int layer_begin, int layer_end) {
  absl::Status s;
  if (!Abandoned()) {
    // DecodeBlocks records the codec metrics under the backend that ran.
    const std::string_view value = batch->values[block].bytes;
    const absl::Span<const uint8_t> packed(reinterpret_cast<const uint8_t*>(value.data()),
                                           value.size());
    const codec::LayerRange range{layer_begin, layer_end};
    const absl::Span<uint8_t> dst(reinterpret_cast<uint8_t*>(out),
                                  static_cast<size_t>(layer_end - layer_begin) * layer_bytes_);
    s = DecodeBlocks(ctx_->backend, ns_->codec, absl::MakeConstSpan(&packed, 1), out_dtype_, range,
                     {dst})[0];
    if (!s.ok()) {
      s = absl::InternalError(absl::StrCat(
          "block ", index, " passed its checksum but does not decode: ", std::string(s.message())));
    }
  }
  std::unique_lock<std::mutex> l(mu_);
  --tasks_;
  if (--batch->decodes == 0) std::vector<PinnedValue>().swap(batch->values);
  if (!s.ok()) Fail(s);
  Pump(l);
}

void GetBlocksReactor::OnBudget(const absl::Status& status) {
  std::unique_lock<std::mutex> l(mu_);
  ticket_ = false;
  if (!status.ok()) {
    Fail(status);
  } else {
    held_bytes_ += pending_reserve_;
    granted_ = pending_reserve_;
  }
  pending_reserve_ = 0;
  Pump(l);
}

void GetBlocksReactor::Pump(std::unique_lock<std::mutex>& l) {
  const size_t total = static_cast<size_t>(request_.block_hashes_size());
  const bool stop = !error_.ok() || Abandoned();
  bool start_write = false;
  bool write_and_finish = false;
  bool start_fetch = false;
  size_t fetch_begin = 0, fetch_count = 0;
  uint64_t fetch_reserved = 0;
  if (!stop && !writing_) {
    while (!batches_.empty() && batches_.front()->decodes == 0 &&
           batches_.front()->next_message == batches_.front()->messages.size()) {
      batches_.pop_front();
    }
    if (!batches_.empty() && batches_.front()->decodes == 0) {
      Batch& b = *batches_.front();
      Batch::Message& m = b.messages[b.next_message++];
      current_ = SerializeGetBlocksResponse(m.fields, m.data);
      current_bytes_ = m.data.size;
      m.data = Payload{};  // the slice in current_ keeps the bytes until gRPC has sent them
      writing_ = true;
      start_write = true;
      // The call's last message goes out with its status in one operation (one batch, no
      // OnWriteDone reaction before the Finish): a one-block reply costs one write, not two.
      // Its budget bytes stay held until OnDone, when gRPC is done with the buffer.
      if (b.next_message == b.messages.size() && batches_.size() == 1 && next_ >= total &&
          tasks_ == 0 && !ticket_ && granted_ == 0 && !finished_) {
        finished_ = true;
        write_and_finish = true;
        batches_.clear();
        to_release_ += held_bytes_ - current_bytes_;
        held_bytes_ = current_bytes_;
      }
    }
  }
  if (granted_ != 0 && stop) {  // budget granted to a call that is over
    held_bytes_ -= granted_;
    to_release_ += granted_;
    granted_ = 0;
  }
  if (!stop && !fetching_ && !ticket_ && next_ < total &&
      (granted_ != 0 || held_bytes_ < kRefillBytes)) {
    const size_t per_block = std::max<size_t>(
        1, encoding_ == v1::ENCODING_RAW ? decoded_bytes_ : ns_->codec.packed_bytes());
    fetch_count =
        std::min({total - next_, kFetchBlocks, std::max<size_t>(1, kFetchBytes / per_block)});
    fetch_begin = next_;
    if (granted_ != 0) {
      fetch_reserved = granted_;
      granted_ = 0;
      fetching_ = true;
      ++tasks_;
      start_fetch = true;
    } else {
      fetch_reserved = fetch_count * per_block;
      if (lease_.Acquire(
              fetch_reserved, std::chrono::milliseconds(ctx_->limits.admission_timeout_ms),
              [self = Ref(this)](const absl::Status& status) { self->OnBudget(status); })) {
        held_bytes_ += fetch_reserved;
        fetching_ = true;
        ++tasks_;
        start_fetch = true;
      } else {
        ticket_ = true;
        pending_reserve_ = fetch_reserved;
      }
    }
  }
  const bool done =
      !writing_ && tasks_ == 0 && !ticket_ && (stop || (batches_.empty() && next_ >= total));
  bool finish = false;
  absl::Status status;
  if (done && !finished_) {
    finished_ = true;
    finish = true;
    batches_.clear();
    to_release_ += held_bytes_;
    held_bytes_ = 0;
    status = !error_.ok() ? error_
                          : (Abandoned() ? absl::CancelledError("GetBlocks cancelled by the client")
                                         : absl::OkStatus());
  }
  const uint64_t release = to_release_;
  to_release_ = 0;
  l.unlock();
  if (release != 0) lease_.Release(release);
  if (write_and_finish) {
    const grpc::Status ok = scope_.Complete(absl::OkStatus());
    HandedToGrpc(this);
    StartWriteAndFinish(&current_, grpc::WriteOptions(), ok);
  } else if (start_write) {
    HandedToGrpc(this);
    StartWrite(&current_);
  }
  // PACKED replies need no decode: when RocksDB holds the blocks in memory (memtable, caches),
  // they are read right here, without the hop to the I/O pool and back. The read cannot block
  // (kBlockCacheTier); a batch that would is read on the pool as before.
  if (start_fetch && encoding_ == v1::ENCODING_PACKED) {
    const Ref self(this);  // a nested Pump may finish the call
    if (Fetch(fetch_begin, fetch_count, fetch_reserved, /*cache_only=*/true)) return;
  }
  if (start_fetch) {
    const bool queued = ctx_->io_pool->Submit(
        [self = Ref(this), fetch_begin, fetch_count, fetch_reserved] {
          self->Fetch(fetch_begin, fetch_count, fetch_reserved);
        },
        [self = Ref(this)](const absl::Status& s) {
          std::unique_lock<std::mutex> l2(self->mu_);
          --self->tasks_;
          self->fetching_ = false;
          self->Fail(s);
          self->Pump(l2);
        });
    if (!queued) {
      std::unique_lock<std::mutex> l2(mu_);
      --tasks_;
      fetching_ = false;
      Fail(PoolFull(*ctx_->io_pool));
      Pump(l2);
    }
  }
  if (finish) {
    const grpc::Status done = scope_.Complete(status);
    HandedToGrpc(this);
    Finish(done);
  }
}

void GetBlocksReactor::OnWriteDone(bool ok) {
  const ReactionScope reaction(this);
  std::unique_lock<std::mutex> l(mu_);
  try {
    writing_ = false;
    held_bytes_ -= current_bytes_;
    to_release_ += current_bytes_;
    current_bytes_ = 0;
    current_.Clear();
    if (!ok) abandoned_ = true;
  } catch (...) {
    Fail(CaughtException(ctx_, "GetBlocks OnWriteDone", std::current_exception()));
  }
  Pump(l);
}

void GetBlocksReactor::OnDone() {
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
  if (h != 0) (void)ctx_->watchdog->Disarm(h);  // gRPC's reference keeps the reactor
  // A call that ended with StartWriteAndFinish still holds its last message's bytes.
  uint64_t release = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    release = held_bytes_;
    held_bytes_ = 0;
  }
  if (release != 0) lease_.Release(release);
  ReleaseGrpcRef();
}

void GetBlocksReactor::OnCancel() {
  const ReactionScope reaction(this);
  std::unique_lock<std::mutex> l(mu_);
  abandoned_ = true;
  const bool waiting = ticket_;
  l.unlock();
  const bool cancelled = waiting && lease_.Cancel();
  l.lock();
  if (cancelled && ticket_) {
    ticket_ = false;
    pending_reserve_ = 0;
  }
  Pump(l);
}

}  // namespace turbokv::server
