#include "server/service/pipeline_env.h"

#include <utility>

namespace turbokv::server {
namespace {

SubmitFn SubmitTo(CodecPool* pool) {
  return [pool](CodecPool::Task task, CodecPool::OnException on_exception) {
    if (pool->Submit(std::move(task), std::move(on_exception))) return absl::OkStatus();
    return PoolFull(*pool);
  };
}

}  // namespace

PipelineEnv PipelineEnv::FromContext(ServiceContext* ctx) {
  PipelineEnv env;
  env.codec = SubmitTo(ctx->pool);
  env.io = SubmitTo(ctx->io_pool);
  BlockStore* store = ctx->store;
  env.commit = [store](uint64_t namespace_id, absl::Span<const BlockStore::BlockWrite> blocks,
                       BlockStore::ChainCursor* chain) {
    return store->PutBlocks(namespace_id, blocks, chain);
  };
  env.fetch = [store](uint64_t namespace_id, absl::Span<const std::string_view> hashes,
                      BlockStore::ChainCursor* chain, bool* would_block) {
    return store->GetPinnedBlocks(namespace_id, hashes, would_block, chain);
  };
  env.metrics = ctx->metrics;
  env.backend = &ctx->backend;
  env.limits = ctx->limits;
  return env;
}

}  // namespace turbokv::server
