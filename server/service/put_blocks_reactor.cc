#include "server/service/put_blocks_reactor.h"

#include <exception>
#include <utility>

namespace turbokv::server {
namespace {

PutPipeline::Call MakeCall(ServiceContext* ctx, grpc::CallbackServerContext* context,
                           const Principal& caller) {
  PutPipeline::Call call;
  call.resolve = [registry = ctx->registry, caller](uint64_t id) {
    return registry->Get(id, caller);
  };
  call.lease = BudgetLease(ctx->budget, caller.tenant);
  call.quota_bytes = ctx->auth == nullptr ? 0 : ctx->auth->QuotaBytes(caller.tenant);
  call.default_deadline = DefaultDeadline(*ctx, *context);
  call.deadline = call.default_deadline.has_value()
                      ? std::chrono::system_clock::now() +
                            std::chrono::milliseconds(ctx->limits.default_deadline_ms)
                      : context->deadline();
  return call;
}

}  // namespace

PutBlocksReactor::PutBlocksReactor(ServiceContext* ctx, grpc::CallbackServerContext* context,
                                   v1::PutBlocksResponse* response, const Principal& caller)
    : ctx_(ctx),
      response_(response),
      scope_(ctx, RpcMethod::kPutBlocks),
      watch_(ctx->watchdog, context),
      pipeline_(PipelineEnv::FromContext(ctx), MakeCall(ctx, context, caller), this) {
  pipeline_.Start(ctx_->shutting_down.load() ? ShuttingDown() : absl::OkStatus());
  HandedToGrpc(this);
}

void PutBlocksReactor::OnReadDone(bool ok) {
  const ReactionScope reaction(this);
  try {
    pipeline_.OnRead(ok);
  } catch (...) {
    pipeline_.OnError(CaughtException(ctx_, "PutBlocks OnReadDone", std::current_exception()));
  }
}

void PutBlocksReactor::OnCancel() {
  const ReactionScope reaction(this);
  pipeline_.OnCancel();
}

void PutBlocksReactor::OnDone() {
  InReaction(this);
  watch_.Done();
  ReleaseGrpcRef();
}

void PutBlocksReactor::StartRead(v1::PutBlocksRequest* into) {
  HandedToGrpc(this);
  grpc::ServerReadReactor<v1::PutBlocksRequest>::StartRead(into);
}

void PutBlocksReactor::Finish(const absl::Status& status, std::vector<v1::BlockResult> results) {
  for (v1::BlockResult& r : results) *response_->add_results() = std::move(r);
  const grpc::Status done = scope_.Complete(status);
  HandedToGrpc(this);
  grpc::ServerReadReactor<v1::PutBlocksRequest>::Finish(done);
}

void PutBlocksReactor::ArmTimer(std::chrono::steady_clock::time_point when) {
  watch_.Arm(when, [self = ReactorRef<PutBlocksReactor>(this)] {
    if (self->watch_.Fired()) self->pipeline_.OnTimer();
  });
}

void PutBlocksReactor::Cancel() { watch_.TryCancel(); }

std::shared_ptr<void> PutBlocksReactor::Pin() { return PinSelf(); }

}  // namespace turbokv::server
