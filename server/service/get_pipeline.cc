#include "server/service/get_pipeline.h"

#include <algorithm>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace turbokv::server {
namespace {

// One fetch reads at most this many blocks / this many output bytes; the next fetch starts
// once fewer than kRefillBytes are waiting to be written.
constexpr size_t kFetchBlocks = 32;
constexpr size_t kFetchBytes = size_t{32} << 20;
constexpr size_t kRefillBytes = size_t{8} << 20;

}  // namespace

struct GetPipeline::Batch {
  struct Message {
    v1::GetBlocksResponse fields;  // all but `data`
    Payload data;
    BudgetShare charge;  // data.size bytes of the budget, until written
  };
  std::vector<Message> messages;    // in request order
  std::vector<PinnedValue> values;  // RAW: the packed blocks being decoded
  size_t next_message = 0;          // first one not handed to the writer
  // Decode tasks in flight. Taken under mu_; a task gives its unit back without the lock and
  // only the batch's last one (or a failed one) takes mu_: one lock per batch, not per task.
  std::atomic<int> decodes{0};
  // Set by a failing decode task before it gives its unit back: from then on the batch's
  // buffer is never written out, even by a thread that sees decodes == 0 before that task
  // has taken mu_ and failed the call (the failed layers were never written).
  std::atomic<bool> failed{false};
};

GetPipeline::GetPipeline(PipelineEnv env, Call call, Host* host)
    : env_(std::move(env)), call_(std::move(call)), host_(host) {}

void GetPipeline::Start(absl::StatusOr<v1::GetBlocksRequest> request) {
  absl::Status s = request.status();
  if (s.ok()) {
    request_ = *std::move(request);
    s = Prepare();
  }
  if (!s.ok() || request_.block_hashes().empty()) {
    {
      Lock l(mu_);
      finished_ = true;
    }
    host_->Finish(s);
    return;
  }
  Lock l(mu_);
  if (call_.default_deadline.has_value()) host_->ArmTimer(*call_.default_deadline);
  starting_ = true;
  Pump(l);
}

absl::Status GetPipeline::Prepare() {
  absl::StatusOr<std::shared_ptr<const Namespace>> ns = call_.resolve(request_.namespace_id());
  if (!ns.ok()) return ns.status();
  ns_ = *std::move(ns);
  const size_t count = static_cast<size_t>(request_.block_hashes_size());
  if (count > env_.limits.max_hashes_per_call) {
    return absl::ResourceExhaustedError(
        absl::StrCat(count, " block hashes in one call; at most ", env_.limits.max_hashes_per_call,
                     " are allowed (--max-hashes-per-call): split the call"));
  }
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
  const auto layers = static_cast<uint32_t>(ns_->codec.shape().num_layers);
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

void GetPipeline::OnTimer() {
  {
    Lock l(mu_);
    if (finished_) return;
    env_.metrics->RecordDefaultDeadlineCancel();
    Fail(absl::DeadlineExceededError(
        absl::StrCat("the call set no deadline and ran past the server's default of ",
                     env_.limits.default_deadline_ms, " ms (--default-deadline-ms)")));
  }
  // A write the client does not read ends (ok = false) and the call finishes.
  host_->Cancel();
}

bool GetPipeline::Abandoned() const {
  return abandoned_.load() || std::chrono::system_clock::now() > call_.deadline;
}

uint64_t GetPipeline::HeldLocked() const {
  uint64_t dropped = 0;
  for (const BudgetShare& s : drop_) dropped += s.bytes();
  return call_.lease.held() - std::min(dropped, call_.lease.held());
}

void GetPipeline::Fail(const absl::Status& status) {
  if (error_.ok()) error_ = status;
  abandoned_ = true;
}

void GetPipeline::Fetch(size_t begin, size_t count, BudgetShare paid) {
  std::optional<Values> values;
  if (!Abandoned()) {
    std::vector<std::string_view> hashes;
    hashes.reserve(count);
    for (size_t i = begin; i < begin + count; ++i) hashes.push_back(request_.block_hashes(i));
    // One store call; it verifies each block's checksum (XXH3), here on the I/O pool.
    values = env_.fetch(ns_->id, hashes, &chain_, /*would_block=*/nullptr);
  }
  Deliver(begin, count, std::move(paid), std::move(values), /*inline_read=*/false);
}

bool GetPipeline::FetchCached(size_t count, BudgetShare& paid) {
  std::vector<std::string_view> hashes;
  hashes.reserve(count);
  for (size_t i = 0; i < count; ++i) hashes.push_back(request_.block_hashes(i));
  bool would_block = false;
  Values values = absl::UnknownError("not read");
  // Never throws into gRPC's thread, and an error goes the I/O pool's way too (that read
  // reports it, or throws into the pool's barrier).
  try {
    values = env_.fetch(ns_->id, hashes, &chain_, &would_block);
  } catch (...) {
    return false;
  }
  if (!values.ok() || would_block) return false;
  Deliver(0, count, std::move(paid), std::move(values), /*inline_read=*/true);
  return true;
}

void GetPipeline::Deliver(size_t begin, size_t count, BudgetShare paid,
                          std::optional<Values> values, bool inline_read) {
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
  if (values.has_value()) {
    if (!values->ok()) error = values->status();
    env_.metrics->RecordGetBlocksRead(inline_read);
    for (size_t j = 0; error.ok() && j < count; ++j) {
      const auto index = static_cast<uint32_t>(begin + j);
      std::optional<PinnedValue>& value = (**values)[j];
      // One message: `size` bytes of `owner` at `at`, at byte `offset` of the block, paid for
      // from the batch's reservation (or taken: a block larger than reserved for it).
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
        m.charge = paid.Split(size);
        if (m.charge.bytes() < size) m.charge.Absorb(call_.lease.Take(size - m.charge.bytes()));
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
        const std::string_view stored = value->bytes;  // as the store holds it: no copy
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
  env_.metrics->RecordGetBlocks(found, count - found);
  paid.Reset();  // what the batch did not need (unlocked: a waiter's callback may run here)

  Lock l(mu_);
  --tasks_;
  fetching_ = false;
  next_ = begin + count;
  if (!error.ok()) Fail(error);
  if (error_.ok() && !Abandoned()) {
    batches_.push_back(batch);
    std::shared_ptr<void> pin = host_->Pin();
    if (!jobs.empty()) ++tasks_;  // tasks_ counts batches being decoded
    // All units first: a task that ends before the next is queued must not be the last.
    batch->decodes.store(static_cast<int>(jobs.size()), std::memory_order_relaxed);
    for (size_t i = 0; i < jobs.size(); ++i) {
      const Job& j = jobs[i];
      absl::Status queued = env_.codec(
          [this, pin, batch, j] {
            DecodeTask(batch, j.block, j.index, j.out, j.layer_begin, j.layer_end);
          },
          [this, pin, batch](const absl::Status& status) {
            env_.metrics->RecordInternalFailure();
            DecodeDone(batch, status);
          });
      if (!queued.ok()) {
        Fail(queued);
        // The units of the tasks not queued go back here (the lock is held).
        const auto unqueued = static_cast<int>(jobs.size() - i);
        if (batch->decodes.fetch_sub(unqueued, std::memory_order_acq_rel) == unqueued) {
          --tasks_;
          std::vector<PinnedValue>().swap(batch->values);
        }
        break;
      }
    }
  } else {
    // Dropped unsent: their bytes go back once mu_ is released.
    for (Batch::Message& m : batch->messages) drop_.push_back(std::move(m.charge));
  }
  Pump(l);
}

void GetPipeline::DecodeTask(const std::shared_ptr<Batch>& batch, size_t block, uint32_t index,
                             char* out, int layer_begin, int layer_end) {
  absl::Status s;  // skipped once the call is over: Pump sends nothing after that
  if (!Abandoned()) {
    // DecodeBlocks records the codec metrics under the backend that ran.
    const std::string_view value = batch->values[block].bytes;
    const absl::Span<const uint8_t> packed(reinterpret_cast<const uint8_t*>(value.data()),
                                           value.size());
    const codec::LayerRange range{layer_begin, layer_end};
    const absl::Span<uint8_t> dst(reinterpret_cast<uint8_t*>(out),
                                  static_cast<size_t>(layer_end - layer_begin) * layer_bytes_);
    s = DecodeBlocks(*env_.backend, ns_->codec, absl::MakeConstSpan(&packed, 1), out_dtype_, range,
                     {dst})[0];
    if (!s.ok()) {
      s = absl::InternalError(absl::StrCat(
          "block ", index, " passed its checksum but does not decode: ", std::string(s.message())));
    }
  }
  DecodeDone(batch, s);
}

void GetPipeline::DecodeDone(const std::shared_ptr<Batch>& batch, const absl::Status& status) {
  if (!status.ok()) batch->failed.store(true, std::memory_order_relaxed);  // before the unit
  // acq_rel: the last task sees every other task's output (the writes that follow send it).
  const bool last = batch->decodes.fetch_sub(1, std::memory_order_acq_rel) == 1;
  if (!last && status.ok()) return;
  Lock l(mu_);
  if (last) {
    --tasks_;
    std::vector<PinnedValue>().swap(batch->values);
  }
  if (!status.ok()) Fail(status);
  Pump(l);
}

void GetPipeline::OnBudget(const absl::Status& status, uint64_t bytes) {
  Lock l(mu_);
  waiting_budget_ = false;
  if (!status.ok()) {
    Fail(status);
  } else {
    granted_ = call_.lease.Granted(bytes);
  }
  Pump(l);
}

void GetPipeline::Pump(Lock& l) {
  const auto total = static_cast<size_t>(request_.block_hashes_size());
  const bool stop = !error_.ok() || Abandoned();
  bool start_write = false;
  bool last = false;
  const v1::GetBlocksResponse* fields = nullptr;
  Payload data;
  if (!stop && !writing_) {
    while (!batches_.empty() && batches_.front()->decodes.load(std::memory_order_acquire) == 0 &&
           batches_.front()->next_message == batches_.front()->messages.size()) {
      batches_.pop_front();
    }
    if (!batches_.empty() && batches_.front()->decodes.load(std::memory_order_acquire) == 0 &&
        !batches_.front()->failed.load(std::memory_order_relaxed)) {
      Batch& b = *batches_.front();
      Batch::Message& m = b.messages[b.next_message++];
      fields = &m.fields;  // read-only until the batch is popped, which needs !writing_
      data = std::exchange(m.data, Payload{});
      in_write_ = std::move(m.charge);
      writing_ = true;
      start_write = true;
      // The call's last message goes out with its status in one operation (one batch, no
      // OnWriteDone reaction before the Finish): a one-block reply costs one write, not two.
      // Its budget bytes stay held until OnDone, when gRPC is done with the buffer.
      if (b.next_message == b.messages.size() && batches_.size() == 1 && next_ >= total &&
          tasks_ == 0 && !waiting_budget_ && granted_.bytes() == 0 && !finished_) {
        finished_ = true;
        last = true;
      }
    }
  }
  if (stop && granted_.bytes() != 0) drop_.push_back(std::move(granted_));  // the call is over
  bool start_fetch = false;
  size_t fetch_begin = 0, fetch_count = 0;
  BudgetShare paid;
  if (!stop && !fetching_ && !waiting_budget_ && next_ < total &&
      (granted_.bytes() != 0 || HeldLocked() < kRefillBytes)) {
    const size_t per_block = std::max<size_t>(
        1, encoding_ == v1::ENCODING_RAW ? decoded_bytes_ : ns_->codec.packed_bytes());
    fetch_count =
        std::min({total - next_, kFetchBlocks, std::max<size_t>(1, kFetchBytes / per_block)});
    fetch_begin = next_;
    if (granted_.bytes() != 0) {
      paid = std::move(granted_);
      start_fetch = true;
    } else {
      const uint64_t want = fetch_count * per_block;
      if (call_.lease.Acquire(want, std::chrono::milliseconds(env_.limits.admission_timeout_ms),
                              [this, pin = host_->Pin(), want](const absl::Status& status) {
                                OnBudget(status, want);
                              })) {
        paid = call_.lease.Granted(want);
        start_fetch = true;
      } else {
        waiting_budget_ = true;
      }
    }
    if (start_fetch) {
      fetching_ = true;
      ++tasks_;
    }
  }
  // Start's fetch of a PACKED call that fits one batch: first from the read cache, here.
  const bool try_cached = start_fetch && starting_ && encoding_ == v1::ENCODING_PACKED &&
                          fetch_begin == 0 && fetch_count == total;
  starting_ = false;
  const bool done = !writing_ && tasks_ == 0 && !waiting_budget_ &&
                    (stop || (batches_.empty() && next_ >= total));
  bool finish = false;
  absl::Status status;
  if (done && !finished_) {
    finished_ = true;
    finish = true;
    for (const auto& b : batches_) {
      for (Batch::Message& m : b->messages) drop_.push_back(std::move(m.charge));
    }
    batches_.clear();
    status = !error_.ok() ? error_
                          : (Abandoned() ? absl::CancelledError("GetBlocks cancelled by the client")
                                         : absl::OkStatus());
  }
  ShareBin drop;
  drop.swap(drop_);
  std::shared_ptr<void> pin = start_fetch ? host_->Pin() : nullptr;
  l.unlock();
  drop.clear();
  if (start_write) host_->StartWrite(*fields, data, last);
  if (try_cached && FetchCached(fetch_count, paid)) start_fetch = false;
  if (start_fetch) {
    // Ownership of `paid` moves into the task (std::function needs a copyable callable).
    auto share = std::make_shared<BudgetShare>(std::move(paid));
    absl::Status queued = env_.io([this, pin, fetch_begin, fetch_count,
                                   share] { Fetch(fetch_begin, fetch_count, std::move(*share)); },
                                  [this, pin](const absl::Status& s) {
                                    Lock l2(mu_);
                                    --tasks_;
                                    fetching_ = false;
                                    Fail(s);
                                    Pump(l2);
                                  });
    if (!queued.ok()) {
      share->Reset();
      Lock l2(mu_);
      --tasks_;
      fetching_ = false;
      Fail(queued);
      Pump(l2);
    }
  }
  if (finish) host_->Finish(status);
}

void GetPipeline::OnWriteDone(bool ok) {
  Lock l(mu_);
  writing_ = false;
  drop_.push_back(std::move(in_write_));
  if (!ok) abandoned_ = true;
  Pump(l);
}

void GetPipeline::OnError(const absl::Status& status) {
  Lock l(mu_);
  Fail(status);
  Pump(l);
}

void GetPipeline::OnDone() {
  // A call that ended with its last message's write still holds that message's bytes.
  BudgetShare last;
  Lock l(mu_);
  last = std::move(in_write_);
  l.unlock();
}

void GetPipeline::OnCancel() {
  Lock l(mu_);
  abandoned_ = true;
  const bool waiting = waiting_budget_;
  l.unlock();
  const bool cancelled = waiting && call_.lease.Cancel();
  l.lock();
  if (cancelled && waiting_budget_) waiting_budget_ = false;
  Pump(l);
}

}  // namespace turbokv::server
