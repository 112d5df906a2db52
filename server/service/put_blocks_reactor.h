// PutBlocks: receives chunked blocks from the client stream and stores them, acknowledging
// each with one BlockResult in stream order.
//
// The path of a RAW block on the CPU codec: each chunk's payload is moved out of the request
// (no copy) and its whole sections (one layer's K or V) are encoded on the codec pool as soon
// as the chunk arrives, straight into the block's packed buffer, several tasks per chunk, so
// a large block's layers are encoded in parallel while the rest of it is still on the wire.
// Only a section split across two chunks is copied (once). The last task seals the block
// (header, checksum). PACKED blocks (and RAW ones on the CUDA backend) are reassembled and
// validated (or encoded) on the pool when complete.
//
// Order: blocks are committed to the store in stream order, one commit in flight per stream,
// each commit the whole ready prefix as one WriteBatch on the I/O pool. So within a stream the
// later put of a hash always wins, and across streams the last acknowledged put wins (a stream
// is acknowledged only after its commits). Concurrent streams commit concurrently (RocksDB
// group-commits them); the store keeps each block whole.
//
// Memory: every chunk (raw, plus its share of the packed block on the streaming encoder) is
// charged to the call's lease of the in-flight budget (budget_lease.h, under the caller's
// tenant) before it is read, and released when its block is committed or dropped; buffers
// grow with the bytes received, never with what a client declares. The stream reserves a read
// window (kReadWindowBytes) ahead of the data and reads on from it, so an idle stream holds one
// window and a slow one what it sent plus one window (put_blocks_reactor.cc; docs/server.md).
// A stream also stops reading, between blocks, while it holds kStreamWindowBytes. A stream that
// cannot get budget within limits.admission_timeout_ms fails with RESOURCE_EXHAUSTED.
//
// Timers (ServiceContext::watchdog): a stream whose client sends nothing for
// limits.stream_idle_timeout_ms while a read is pending, and a call without a client deadline
// that runs past limits.default_deadline_ms, are cancelled (TryCancel; counted in
// turbokv_stream_idle_timeouts_total / turbokv_default_deadline_cancels_total).
//
// Per-block problems are per-block results (the RPC itself is OK): a hash outside 8..32 bytes,
// an encoding other than RAW/PACKED, block_bytes that is not the namespace's raw/packed size,
// chunks out of order or overrunning the block, a block cut short by the next block or by the
// end of the stream (INVALID_ARGUMENT; the block is not stored), a malformed packed block
// (INVALID_ARGUMENT or DATA_LOSS), no room (RESOURCE_EXHAUSTED), a block that does not fit in
// the tenant's quota even after evicting the tenant's own evictable blocks, or that is larger
// than the whole quota (RESOURCE_EXHAUSTED), a full worker queue (RESOURCE_EXHAUSTED). The RPC
// fails only when the stream as a whole is unusable: unknown
// namespace (NOT_FOUND), namespace_id changing within the stream (INVALID_ARGUMENT), no
// in-flight budget (RESOURCE_EXHAUSTED), shutdown (UNAVAILABLE), a bug caught by the exception
// barrier (INTERNAL). Blocks of a failed RPC may have been stored but are not acknowledged.
#ifndef TURBOKV_SERVER_SERVICE_PUT_BLOCKS_REACTOR_H_
#define TURBOKV_SERVER_SERVICE_PUT_BLOCKS_REACTOR_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "server/service/reactor_ref.h"
#include "server/service/service_context.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::server {

// Validates a packed block against its namespace: parseable header, namespace id, header bytes
// equal to the namespace codec's header(), checksum. INVALID_ARGUMENT or DATA_LOSS.
[[nodiscard]] absl::Status ValidatePackedBlock(const Namespace& ns,
                                               absl::Span<const uint8_t> packed);

// Owned by gRPC and by its pending pool tasks and budget callback (reactor_ref.h): deleted
// when OnDone and the last of them have let go.
class PutBlocksReactor final : public grpc::ServerReadReactor<v1::PutBlocksRequest>,
                               public RefCountedReactor {
 public:
  // `caller`: the authenticated caller (namespaces of other tenants are unknown to it).
  PutBlocksReactor(ServiceContext* ctx, grpc::CallbackServerContext* context,
                   v1::PutBlocksResponse* response, Principal caller);

  void OnReadDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  using Ref = ReactorRef<PutBlocksReactor>;

  struct Block;
  using BlockPtr = std::shared_ptr<Block>;

  // All below require mu_ unless noted.
  void HandleMessage(v1::PutBlocksRequest& req);
  void StartBlock(v1::PutBlocksRequest& req);
  // RESOURCE_EXHAUSTED when a block of the namespace is larger than the caller's tenant's
  // whole quota (the store keeps the tenant within it by evicting its own blocks).
  [[nodiscard]] absl::Status CheckQuota();
  void AppendChunk(v1::PutBlocksRequest& req);
  void FeedSections(const BlockPtr& b, std::string data);
  void SpawnEncode(const BlockPtr& b, std::shared_ptr<const std::string> data, size_t offset,
                   size_t bytes, size_t first_section);
  void OnBlockReceived(const BlockPtr& b);
  void Spawn(const BlockPtr& b, std::function<void()> task);
  void TaskDone(const BlockPtr& b, const absl::Status& status);
  void MaybeReady(const BlockPtr& b);  // seals and marks ready once whole and encoded
  size_t AddResult(const std::string& hash, const absl::Status& status);
  void FailBlock(const BlockPtr& b, const absl::Status& status);
  void FailStream(const absl::Status& status);
  void MaybeCommit();
  // After every event: commits what is ready, starts the next read (taking budget first) or
  // pauses, finishes the call once nothing is in flight, and releases budget. Unlocks `l`.
  void Settle(std::unique_lock<std::mutex>& l);
  void FinishNow();  // without mu_, once
  // The header's block_count was given and every block it declared has been read whole (or
  // refused): only the end of the stream may come.
  bool AllDeclaredBlocksIn() const;

  // One message's charge (its raw bytes and, on the streaming encoder, its packed share).
  void SetMessageBytes();
  // Packed bytes charged for the first `raw_received` raw bytes of a streaming RAW block.
  uint64_t PackedShare(uint64_t raw_received) const;
  // Moves `bytes` from the read window to block `b` (taking what the window lacks).
  void Charge(const BlockPtr& b, uint64_t bytes);
  void ReleaseWindowLocked();  // the window's unused rest goes back (after the unlock)
  void ArmWatchdogLocked();

  // Without mu_.
  void OnBudget(const absl::Status& status);
  void OnWatchdog();  // idle timeout or default deadline: cancels the call, or re-arms
  void EncodeTask(const BlockPtr& b, std::shared_ptr<const std::string> data, size_t offset,
                  size_t bytes, size_t first_section);
  void WholeBlockTask(const BlockPtr& b);
  // `ends_request`: the batch holds the stream's last block (BlockStore::ChainCursor).
  void CommitTask(std::vector<BlockPtr> blocks, bool ends_request);
  bool Abandoned() const;  // cancelled, past the deadline, or failed as a whole

  ServiceContext* const ctx_;
  const Principal caller_;
  v1::PutBlocksResponse* const response_;
  RpcScope scope_;
  grpc::CallbackServerContext* const context_;
  BudgetLease lease_;
  // The server's default deadline, when the client set none.
  const std::optional<std::chrono::steady_clock::time_point> call_deadline_;
  const std::chrono::system_clock::time_point deadline_;
  std::atomic<bool> abandoned_{false};

  std::mutex mu_;
  v1::PutBlocksRequest request_;
  std::shared_ptr<const Namespace> ns_;
  bool streaming_encode_ = false;  // RAW on the CPU codec: encode sections as chunks arrive
  BlockPtr current_;
  // Later chunks of a rejected block are dropped silently (an optional: a rejected empty hash
  // is a hash too, so its later chunks give no extra results).
  std::optional<std::string> skip_hash_;
  std::deque<BlockPtr> pending_;  // accepted blocks not yet committed, in stream order
  std::vector<v1::BlockResult> results_;
  uint64_t held_bytes_ = 0;    // budget bytes this stream holds (= lease_.held())
  uint64_t reserve_left_ = 0;  // of the read window, not yet given to a block
  // The most one message may charge (kReadReserveBytes, plus its packed share once the
  // namespace is known and its RAW blocks go to the streaming encoder).
  uint64_t message_bytes_ = (uint64_t{1} << 20) + 4096;
  std::optional<uint64_t> declared_blocks_;  // the header's block_count, when not 0
  // The header's chain_continues: no commit of this stream ends the request.
  bool chain_continues_ = false;
  uint64_t ticket_bytes_ = 0;                         // what the lease waits for
  uint64_t to_release_ = 0;                           // budget bytes to give back (outside mu_)
  bool waiting_budget_ = false;                       // the lease waits; OnBudget comes
  std::chrono::steady_clock::time_point read_since_;  // when the pending read started
  CallWatchdog::Handle watch_ = 0;
  bool watchdog_done_ = false;  // OnDone ran: arm nothing more
  // Orders TryCancel (watchdog thread) before OnDone, after which the context is gone.
  std::mutex cancel_mu_;
  bool grpc_done_ = false;
  int tasks_ = 0;  // pool tasks in flight (encode, validate, commit)
  bool committing_ = false;
  // The request's place in its chain across the store calls (one at a time) it takes.
  BlockStore::ChainCursor chain_;
  bool read_pending_ = false;
  bool paused_ = false;
  bool reading_done_ = false;
  bool finished_ = false;
  absl::Status fatal_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_PUT_BLOCKS_REACTOR_H_
