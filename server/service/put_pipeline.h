// The PutBlocks pipeline of one stream, without gRPC: read -> assemble -> encode -> commit.
//
//   read      the adapter (PutBlocksReactor) reads one message when the pipeline asks
//             (Host::StartRead) and hands it back (OnMessage / OnEnd);
//   assemble  ChunkAssembler (chunk_assembler.h) checks it and cuts it into blocks, on the
//             calling thread (pure bookkeeping: no codec, no I/O);
//   encode    on the codec pool: a RAW chunk's whole sections (one layer's K or V) are encoded
//             as soon as the chunk arrives, straight into the block's packed buffer, several
//             tasks per chunk (a large block's layers encode in parallel while the rest of it
//             is still on the wire; only a section split across two chunks is copied, once);
//             the task that finishes a whole block seals it (header, checksum). PACKED blocks
//             (and RAW ones on the CUDA backend) are validated (or encoded) whole on the pool;
//   commit    on the I/O pool, in stream order, one commit in flight per stream, each the
//             whole ready prefix (at most 64 MiB) as one WriteBatch. So within a stream the
//             later put of a hash wins, and across streams the last acknowledged put wins.
//
// Memory: every chunk (its raw bytes, plus its share of the packed block on the streaming
// encoder) is paid for from the call's lease of the in-flight budget (budget_lease.h, under
// the caller's tenant, so the tenant's share holds) before it is read: the stream reserves a
// read window (4 MiB, at least one message's charge) and reads on from it; each chunk's bytes
// are split off the window into a BudgetShare that the block owns and that goes back when the
// block is committed or dropped. An idle stream holds one window, a slow one what it sent
// plus one window; a stream stops reading, between blocks, while it holds 64 MiB. A stream
// that cannot get budget within limits.admission_timeout_ms fails with RESOURCE_EXHAUSTED.
//
// Timers: OnTimer (the adapter's watchdog entry, armed through Host::ArmTimer) cancels a stream
// whose client sent nothing for limits.stream_idle_timeout_ms while a read is pending, and a
// call that runs past its default deadline (the client set none).
//
// Per-block problems are per-block results (chunk_assembler.h; a malformed packed block is
// INVALID_ARGUMENT or DATA_LOSS, a store refusal its code, a full pool RESOURCE_EXHAUSTED); the
// call fails as a whole only when the stream is unusable (unknown namespace NOT_FOUND, stream
// errors of the assembler, no budget RESOURCE_EXHAUSTED, cancelled, deadline, a bug caught by
// the exception barrier INTERNAL). Blocks of a failed call may have been stored but are not
// acknowledged.
//
// Thread safety: the On* events may come from any thread (one message at a time: the adapter
// reads one); the pipeline's state is under one mutex. Host calls are made without it (ArmTimer
// excepted).
#ifndef TURBOKV_SERVER_SERVICE_PUT_PIPELINE_H_
#define TURBOKV_SERVER_SERVICE_PUT_PIPELINE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/service/budget_lease.h"
#include "server/service/chunk_assembler.h"
#include "server/service/pipeline_env.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::server {

// Validates a packed block against its namespace: parseable header, namespace id, header bytes
// equal to the namespace codec's header(), checksum. INVALID_ARGUMENT or DATA_LOSS.
[[nodiscard]] absl::Status ValidatePackedBlock(const Namespace& ns,
                                               absl::Span<const uint8_t> packed);

class PutPipeline {
 public:
  // The adapter's side (PutBlocksReactor; a test's fake). Called without the pipeline's lock.
  class Host {
   public:
    virtual ~Host() = default;
    // Read the next message into `into`; its end comes as OnMessage or OnEnd.
    virtual void StartRead(v1::PutBlocksRequest* into) = 0;
    // The call's end, exactly once, after which the pipeline calls the host no more: `status`
    // non-OK fails the RPC; else `results` (one per block, in stream order) answer it.
    virtual void Finish(const absl::Status& status, std::vector<v1::BlockResult> results) = 0;
    // Ask for OnTimer at `when` (one entry at a time: asked again only after it came). Called
    // under the pipeline's lock: must not call back into the pipeline.
    virtual void ArmTimer(std::chrono::steady_clock::time_point when) = 0;
    // Cancel the call (the pending read ends; OnEnd, OnCancel come).
    virtual void Cancel() = 0;
    // A token that keeps the host and this pipeline alive while held: captured by every pool
    // task and budget callback (the reactor's reference count, reactor_ref.h).
    virtual std::shared_ptr<void> Pin() = 0;
  };

  struct Call {
    // The namespace of an id, as the caller sees it (NamespaceRegistry::Get).
    std::function<absl::StatusOr<std::shared_ptr<const Namespace>>(uint64_t)> resolve;
    BudgetLease lease;         // the caller's tenant's
    uint64_t quota_bytes = 0;  // the tenant's whole quota; 0: none
    // The server's default deadline (the client set none): OnTimer fails the call past it.
    std::optional<std::chrono::steady_clock::time_point> default_deadline;
    // The call's deadline (the client's or the default): queued work is skipped past it.
    std::chrono::system_clock::time_point deadline = std::chrono::system_clock::time_point::max();
  };

  // `host` must outlive every Host call; env's pools and store the pipeline.
  PutPipeline(PipelineEnv env, Call call, Host* host);
  PutPipeline(const PutPipeline&) = delete;
  PutPipeline& operator=(const PutPipeline&) = delete;

  // Starts the call: takes the first read window and asks for the first read; or finishes
  // at once with `refused` (non-OK: shutdown).
  void Start(const absl::Status& refused = absl::OkStatus());
  // The read asked for ended: ok, with a message in the Host::StartRead target (its data is
  // moved out); not ok, without one (the end of the stream, or the call is over).
  void OnRead(bool ok);
  void OnCancel();  // the client cancelled (or the call's deadline passed)
  void OnTimer();   // the entry asked for by Host::ArmTimer is due
  // An exception escaped the adapter's reaction: the call fails with `status` (INTERNAL).
  void OnError(const absl::Status& status);

 private:
  struct Block;
  using BlockPtr = std::shared_ptr<Block>;
  using Lock = std::unique_lock<std::mutex>;

  // All below require mu_.
  void Assemble(v1::PutBlocksRequest& msg);
  void AddResult(const std::string& hash, const absl::Status& status);
  // Moves `bytes` of the read window to block `b`, taking what the window lacks.
  void Charge(const BlockPtr& b, uint64_t bytes);
  uint64_t HeldLocked() const;  // the budget bytes the stream holds, less those in drop_
  void FeedSections(const BlockPtr& b, std::string data);
  void SpawnEncode(const BlockPtr& b, std::shared_ptr<const std::string> data, size_t offset,
                   size_t bytes, size_t first_section);
  void OnBlockReceived(const BlockPtr& b);
  void Spawn(const BlockPtr& b, std::function<void()> task);
  void MaybeReady(const BlockPtr& b);  // seals and marks ready once whole and encoded
  void FailBlock(size_t index, const absl::Status& status);
  void FailBlock(const BlockPtr& b, const absl::Status& status);
  void FailStream(const absl::Status& status);
  void MaybeCommit();
  void ArmTimerLocked();
  uint64_t PackedShare(uint64_t raw_received) const;
  // After every event: commits what is ready, asks for the next read (taking budget first) or
  // holds back, finishes once nothing is in flight. Unlocks `l`; then gives back the shares
  // dropped under it, and calls the host.
  void Settle(Lock& l);

  // Without mu_.
  // A pool task of `b` is over: the block's last one (or a failed one) takes mu_, marks the
  // block ready when it is whole, and settles.
  void TaskDone(const BlockPtr& b, const absl::Status& status);
  void OnBudget(const absl::Status& status, uint64_t bytes);
  void EncodeTask(const BlockPtr& b, std::shared_ptr<const std::string> data, size_t offset,
                  size_t bytes, size_t first_section);
  void WholeBlockTask(const BlockPtr& b);
  // `ends_request`: the batch holds the stream's last block (BlockStore::ChainCursor).
  void CommitTask(std::vector<BlockPtr> blocks, bool ends_request);
  bool Abandoned() const;  // cancelled, past the deadline, or failed as a whole
  static absl::Status SkippedTaskStatus(bool abandoned);  // what a task that did no work reports

  const PipelineEnv env_;
  Call call_;
  Host* const host_;
  std::atomic<bool> abandoned_{false};

  std::mutex mu_;
  v1::PutBlocksRequest request_;  // the message being read
  std::shared_ptr<const Namespace> ns_;
  std::optional<ChunkAssembler> assembler_;  // from the first message on
  bool streaming_encode_ = false;  // RAW on the CPU codec: encode sections as chunks arrive
  BlockPtr current_;               // the block being received
  std::deque<BlockPtr> pending_;   // accepted blocks not yet committed, in stream order
  std::vector<v1::BlockResult> results_;
  // The read window: budget taken ahead of the data; each chunk's charge is split off it.
  BudgetShare window_;
  ShareBin drop_;           // shares to give back once mu_ is released
  uint64_t releasing_ = 0;  // bytes of shares a Settle took out of drop_ and is giving back
  // The most one message may charge (1 MiB + 4 KiB, plus its packed share on the streaming
  // encoder once the namespace is known).
  uint64_t message_bytes_;
  bool waiting_budget_ = false;  // the lease waits; OnBudget comes
  bool read_pending_ = false;
  std::chrono::steady_clock::time_point read_since_;  // when the pending read started
  int tasks_ = 0;  // blocks with pool tasks in flight (encode, validate), plus the commit
  bool committing_ = false;
  // The request's place in its chain across the store calls (one at a time) it takes.
  BlockStore::ChainCursor chain_;
  bool reading_done_ = false;
  bool finished_ = false;
  absl::Status fatal_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_PUT_PIPELINE_H_
