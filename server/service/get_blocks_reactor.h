// GetBlocks: reads blocks in batches (one MultiGet each) on the I/O pool and streams one
// message per chunk (<= 1 MiB) or per missing block, in request order, fetching the next batch
// while the current one is written.
//
// The request arrives and the responses leave as gRPC byte buffers (the raw callback method):
// a message's `data` is a slice over the stored value or the decode buffer (wire_format.h),
// so no payload byte is copied or zero-filled between RocksDB and the socket.
//
// PACKED: a stored block stays where RocksDB holds it (its pinned blob cache or block cache
// entry, or its read buffer: BlockStore::GetPinnedBlocks) and is sent in chunks of at most
// 1 MiB that point into it; RAW decodes from there too. RAW: a block is decoded into one
// uninitialized buffer; every message carries whole layers of it (or a part of one layer over 1
// MiB), and each message's layers are decoded by their own task on the codec pool, so the layers of
// a large block decode in parallel.
//
// Memory: each batch takes its bytes from the call's lease of the in-flight budget
// (budget_lease.h, under the caller's tenant) before it is read
// and gives each message's bytes back once it is written; a call that cannot get budget
// within limits.admission_timeout_ms fails with RESOURCE_EXHAUSTED. A cancelled call (or one
// past its deadline) skips the codec work still queued.
//
// RPC errors: NOT_FOUND (unknown namespace), INVALID_ARGUMENT (encoding, dtype, layer range,
// a hash outside 8..32 bytes), RESOURCE_EXHAUSTED (too many hashes, no budget, a full worker
// queue), UNAVAILABLE (shutdown), INTERNAL (a verified block that does not decode; a bug
// caught by the exception barrier). A missing, expired or corrupt block is a `found: false`
// message.
//
// The last message of a call is written together with the call's status
// (StartWriteAndFinish): a reply of one message is one write operation.
#ifndef TURBOKV_SERVER_SERVICE_GET_BLOCKS_REACTOR_H_
#define TURBOKV_SERVER_SERVICE_GET_BLOCKS_REACTOR_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "grpcpp/grpcpp.h"
#include "server/service/reactor_ref.h"
#include "server/service/service_context.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::server {

// Largest `data` of one GetBlocksResponse.
inline constexpr size_t kMaxResponseChunkBytes = size_t{1} << 20;

// Owned by gRPC and by its pending pool tasks and budget callback (reactor_ref.h): deleted
// when OnDone and the last of them have let go.
class GetBlocksReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                               public RefCountedReactor {
 public:
  // `request`: a serialized GetBlocksRequest. `caller`: the authenticated caller (namespaces
  // of other tenants are unknown to it).
  GetBlocksReactor(ServiceContext* ctx, grpc::CallbackServerContext* context,
                   const grpc::ByteBuffer* request, Principal caller);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  using Ref = ReactorRef<GetBlocksReactor>;

  struct Batch;

  [[nodiscard]] absl::Status Prepare(const grpc::ByteBuffer* request);
  // Reads blocks [begin, begin + count) and queues their messages; on the I/O pool. With
  // cache_only (PACKED replies, on any thread), it reads only what RocksDB holds in memory and
  // returns false, having changed nothing, when that is not all of it: then run it on the pool.
  bool Fetch(size_t begin, size_t count, uint64_t reserved, bool cache_only = false);
  // Decodes layers [layer_begin, layer_end) of batch->values[block] (request index `index`)
  // into `out`, which has room for exactly those layers.
  void DecodeTask(const std::shared_ptr<Batch>& batch, size_t block, uint32_t index, char* out,
                  int layer_begin, int layer_end);  // on the codec pool
  void OnBudget(const absl::Status& status);
  void OnWatchdog();  // the server's default deadline passed: cancels the call
  bool Abandoned() const;
  // Starts the next write, schedules a fetch, or finishes. Requires mu_ (held by l); unlocks.
  void Pump(std::unique_lock<std::mutex>& l);
  void Fail(const absl::Status& status);  // requires mu_

  ServiceContext* const ctx_;
  const Principal caller_;
  v1::GetBlocksRequest request_;  // parsed in Prepare, then read-only
  RpcScope scope_;
  grpc::CallbackServerContext* const context_;
  BudgetLease lease_;  // this call's bytes of the in-flight budget, under the caller's tenant
  // The server's default deadline, when the client set none.
  const std::optional<std::chrono::steady_clock::time_point> call_deadline_;
  const std::chrono::system_clock::time_point deadline_;
  std::shared_ptr<const Namespace> ns_;
  v1::Encoding encoding_ = v1::ENCODING_PACKED;
  codec::DType out_dtype_ = codec::DType::kFloat16;
  codec::LayerRange range_;
  size_t decoded_bytes_ = 0;  // RAW: bytes of one decoded block
  size_t layer_bytes_ = 0;    // RAW: decoded bytes of one layer
  std::atomic<bool> abandoned_{false};

  std::mutex mu_;
  std::deque<std::shared_ptr<Batch>> batches_;  // fetched, in request order
  grpc::ByteBuffer current_;
  uint64_t current_bytes_ = 0;  // budget bytes of the message being written
  uint64_t held_bytes_ = 0;     // budget bytes held (batches not yet written)
  uint64_t to_release_ = 0;
  bool ticket_ = false;           // the lease waits; OnBudget comes
  uint64_t pending_reserve_ = 0;  // bytes asked for by the waiting ticket
  uint64_t granted_ = 0;          // bytes granted to the waiting ticket, fetch not started
  size_t next_ = 0;               // first request index not fetched yet
  int tasks_ = 0;                 // fetch and decode tasks in flight
  bool fetching_ = false;
  // The request's place in its chain across the store calls (one at a time) it takes.
  BlockStore::ChainCursor chain_;
  CallWatchdog::Handle watch_ = 0;
  bool watchdog_done_ = false;  // OnDone ran
  // Orders TryCancel (watchdog thread) before OnDone, after which the context is gone.
  std::mutex cancel_mu_;
  bool grpc_done_ = false;
  bool writing_ = false;
  bool finished_ = false;
  absl::Status error_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_GET_BLOCKS_REACTOR_H_
