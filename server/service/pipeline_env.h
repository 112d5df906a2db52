// What the put and get pipelines (put_pipeline.h, get_pipeline.h) run on, injected: the codec
// and I/O pools, the store's batch write and read, the metrics, the codec backend and the
// limits. The server builds it from its ServiceContext (FromContext); the pipeline tests give
// it pools that run tasks when the test says, and stores that fail on cue.
#ifndef TURBOKV_SERVER_SERVICE_PIPELINE_ENV_H_
#define TURBOKV_SERVER_SERVICE_PIPELINE_ENV_H_

#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/service/service_context.h"

namespace turbokv::server {

// Queues a task (CodecPool::Submit's contract: `on_exception` gets INTERNAL when it threw).
// RESOURCE_EXHAUSTED (PoolFull), and nothing queued, when the pool's queue is full.
using SubmitFn = std::function<absl::Status(CodecPool::Task task, CodecPool::OnException)>;
// BlockStore::PutBlocks: one WriteBatch, a status per block.
using CommitFn = std::function<std::vector<absl::Status>(
    uint64_t namespace_id, absl::Span<const BlockStore::BlockWrite> blocks,
    BlockStore::ChainCursor* chain)>;
// BlockStore::GetPinnedBlocks (verifies each block's checksum). With `would_block` set, memory
// only (the read cache): *would_block = true, and nothing changed, when that is not enough.
using FetchFn = std::function<absl::StatusOr<std::vector<std::optional<PinnedValue>>>(
    uint64_t namespace_id, absl::Span<const std::string_view> hashes,
    BlockStore::ChainCursor* chain, bool* would_block)>;

struct PipelineEnv {
  SubmitFn codec;  // encode, decode, validate
  SubmitFn io;     // store reads and writes
  CommitFn commit;
  FetchFn fetch;
  Metrics* metrics = nullptr;
  const CodecBackend* backend = nullptr;
  LimitOptions limits;

  // The server's: ctx's pools, store, metrics, backend and limits (ctx outlives the env).
  static PipelineEnv FromContext(ServiceContext* ctx);
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_PIPELINE_ENV_H_
