// The GetBlocks pipeline of one call, without gRPC: fetch -> decode -> write.
//
//   fetch   on the I/O pool: a batch of at most 32 blocks / 32 MiB of output is read with one
//           call of the store (BlockStore::GetPinnedBlocks, which also verifies each block's
//           checksum); the next batch is fetched once fewer than 8 MiB wait to be written.
//           One exception, memory only: a PACKED call that fits one batch first asks the
//           store for what its read cache holds, on the thread that starts the call (gRPC's),
//           and takes the I/O pool's way only when a block would need a disk read (or a
//           write: an expired or damaged block). No read or checksum runs on gRPC's threads;
//   decode  RAW replies, on the codec pool: a block decodes into one uninitialized buffer,
//           every message carries whole layers of it (or a part of one layer over 1 MiB), and
//           each message's layers are decoded by their own task, so the layers of a large
//           block decode in parallel. PACKED replies point into the value as the store read
//           it (or as its read cache holds it): no copy;
//   write   one message per chunk (<= 1 MiB) or per missing block, in request order, through
//           Host::StartWrite; the call's last message goes with its status (one operation).
//
// Memory: each batch is paid for from the call's lease of the in-flight budget (budget_lease.h,
// under the caller's tenant) before it is read; once read, each message owns the share of
// its bytes (BudgetShare), given back once it is written (the last one: once the call is
// done, OnDone). A call that cannot get budget within limits.admission_timeout_ms fails with
// RESOURCE_EXHAUSTED. A cancelled call (or one past its deadline) skips the work still queued.
//
// RPC errors: NOT_FOUND (unknown namespace), INVALID_ARGUMENT (encoding, dtype, layer range,
// a hash outside 8..32 bytes), RESOURCE_EXHAUSTED (too many hashes, no budget, a full worker
// queue), UNAVAILABLE (shutdown), DEADLINE_EXCEEDED (the server's default deadline), CANCELLED,
// INTERNAL (a verified block that does not decode; a bug caught by the exception barrier), a
// store read's error. A missing, expired or corrupt block is a `found: false` message.
//
// Thread safety: the On* events may come from any thread; the state is under one mutex.
// Host calls are made without it (ArmTimer excepted).
#ifndef TURBOKV_SERVER_SERVICE_GET_PIPELINE_H_
#define TURBOKV_SERVER_SERVICE_GET_PIPELINE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>

#include "server/service/budget_lease.h"
#include "server/service/pipeline_env.h"
#include "server/service/wire_format.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::server {

// Largest `data` of one GetBlocksResponse.
inline constexpr size_t kMaxResponseChunkBytes = size_t{1} << 20;

class GetPipeline {
 public:
  class Host {
   public:
    virtual ~Host() = default;
    // Write one message: `fields` (data empty) with `data` as its data. With `last`, the
    // call's final message, written together with the call's status (OK); no OnWriteDone
    // comes for it. `data.owner` must be kept until the write is done.
    virtual void StartWrite(const v1::GetBlocksResponse& fields, const Payload& data,
                            bool last) = 0;
    // The call's end without a final message (exactly once; none after a `last` write).
    virtual void Finish(const absl::Status& status) = 0;
    // Ask for OnTimer at `when`; called under the pipeline's lock: must not call back.
    virtual void ArmTimer(std::chrono::steady_clock::time_point when) = 0;
    virtual void Cancel() = 0;  // cancel the call (a pending write ends with ok = false)
    // Keeps the host and this pipeline alive while held (captured by tasks and callbacks).
    virtual std::shared_ptr<void> Pin() = 0;
  };

  struct Call {
    std::function<absl::StatusOr<std::shared_ptr<const Namespace>>(uint64_t)> resolve;
    BudgetLease lease;
    std::optional<std::chrono::steady_clock::time_point> default_deadline;
    std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  };

  GetPipeline(PipelineEnv env, Call call, Host* host);
  GetPipeline(const GetPipeline&) = delete;
  GetPipeline& operator=(const GetPipeline&) = delete;

  // Starts the call on `request` (or fails it with `refused`, when that is not OK, or with the
  // request's error): the call finishes at once when the request is refused or names no block.
  void Start(absl::StatusOr<v1::GetBlocksRequest> request);
  void OnWriteDone(bool ok);
  void OnCancel();
  void OnTimer();
  void OnError(const absl::Status& status);  // an exception escaped the adapter's reaction
  // gRPC is done with the call: gives back the last message's bytes.
  void OnDone();

 private:
  struct Batch;
  using Lock = std::unique_lock<std::mutex>;

  [[nodiscard]] absl::Status Prepare();
  using Values = absl::StatusOr<std::vector<std::optional<PinnedValue>>>;
  // Reads blocks [begin, begin + count) and queues their messages; on the I/O pool.
  void Fetch(size_t begin, size_t count, BudgetShare paid);
  // Fetch of the whole call from the store's read cache, on the caller's thread: false (and
  // nothing changed, `paid` kept) when a block is not in memory.
  bool FetchCached(size_t count, BudgetShare& paid);
  // Queues the messages of `values` (nullopt: the call was abandoned before the read).
  void Deliver(size_t begin, size_t count, BudgetShare paid, std::optional<Values> values,
               bool inline_read);
  // Decodes layers [layer_begin, layer_end) of batch->values[block] (request index `index`)
  // into `out`, which has room for exactly those layers. On the codec pool.
  void DecodeTask(const std::shared_ptr<Batch>& batch, size_t block, uint32_t index, char* out,
                  int layer_begin, int layer_end);
  // A decode task of `batch` is over: the batch's last one (or a failed one) takes mu_.
  void DecodeDone(const std::shared_ptr<Batch>& batch, const absl::Status& status);
  void OnBudget(const absl::Status& status, uint64_t bytes);
  bool Abandoned() const;
  uint64_t HeldLocked() const;  // budget bytes held, less those in drop_
  // Starts the next write, schedules a fetch, or finishes. Requires mu_ (held by l); unlocks.
  void Pump(Lock& l);
  void Fail(const absl::Status& status);  // requires mu_

  const PipelineEnv env_;
  Call call_;
  Host* const host_;
  v1::GetBlocksRequest request_;  // set by Start, then read-only
  std::shared_ptr<const Namespace> ns_;
  v1::Encoding encoding_ = v1::ENCODING_PACKED;
  codec::DType out_dtype_ = codec::DType::kFloat16;
  codec::LayerRange range_;
  size_t decoded_bytes_ = 0;  // RAW: bytes of one decoded block
  size_t layer_bytes_ = 0;    // RAW: decoded bytes of one layer
  std::atomic<bool> abandoned_{false};

  std::mutex mu_;
  std::deque<std::shared_ptr<Batch>> batches_;  // fetched, in request order
  BudgetShare in_write_;                        // the bytes of the message being written
  BudgetShare granted_;          // granted to the waiting budget request, fetch not started
  ShareBin drop_;                // shares to give back once mu_ is released
  bool waiting_budget_ = false;  // the lease waits; OnBudget comes
  size_t next_ = 0;              // first request index not fetched yet
  int tasks_ = 0;                // the fetch in flight, plus batches being decoded
  bool fetching_ = false;
  bool starting_ = false;  // Start's own Pump: a fetch may try the read cache inline
  // The request's place in its chain across the store calls (one at a time) it takes.
  BlockStore::ChainCursor chain_;
  bool writing_ = false;
  bool finished_ = false;
  absl::Status error_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_GET_PIPELINE_H_
