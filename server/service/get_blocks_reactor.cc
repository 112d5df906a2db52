#include "server/service/get_blocks_reactor.h"

#include <exception>
#include <utility>

#include "grpcpp/impl/codegen/proto_utils.h"

namespace turbokv::server {
namespace {

GetPipeline::Call MakeCall(ServiceContext* ctx, grpc::CallbackServerContext* context,
                           const Principal& caller) {
  GetPipeline::Call call;
  call.resolve = [registry = ctx->registry, caller](uint64_t id) {
    return registry->Get(id, caller);
  };
  call.lease = BudgetLease(ctx->budget, caller.tenant);
  call.default_deadline = DefaultDeadline(*ctx, *context);
  call.deadline = call.default_deadline.has_value()
                      ? std::chrono::system_clock::now() +
                            std::chrono::milliseconds(ctx->limits.default_deadline_ms)
                      : context->deadline();
  return call;
}

absl::StatusOr<v1::GetBlocksRequest> Parse(const grpc::ByteBuffer* request) {
  grpc::ByteBuffer wire(*request);  // shares the slices; Deserialize consumes its argument
  v1::GetBlocksRequest parsed;
  if (!grpc::SerializationTraits<v1::GetBlocksRequest>::Deserialize(&wire, &parsed).ok()) {
    return absl::InvalidArgumentError("the request is not a GetBlocksRequest");
  }
  return parsed;
}

}  // namespace

GetBlocksReactor::GetBlocksReactor(ServiceContext* ctx, grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request, const Principal& caller)
    : ctx_(ctx),
      scope_(ctx, RpcMethod::kGetBlocks),
      watch_(ctx->watchdog, context),
      pipeline_(PipelineEnv::FromContext(ctx), MakeCall(ctx, context, caller), this) {
  absl::StatusOr<v1::GetBlocksRequest> parsed = ShuttingDown();
  if (!ctx_->shutting_down.load()) {
    try {
      parsed = Parse(request);
    } catch (...) {
      parsed = CaughtException(ctx_, "GetBlocks Prepare", std::current_exception());
    }
  }
  pipeline_.Start(std::move(parsed));
  HandedToGrpc(this);
}

void GetBlocksReactor::OnWriteDone(bool ok) {
  const ReactionScope reaction(this);
  current_.Clear();
  try {
    pipeline_.OnWriteDone(ok);
  } catch (...) {
    pipeline_.OnError(CaughtException(ctx_, "GetBlocks OnWriteDone", std::current_exception()));
  }
}

void GetBlocksReactor::OnCancel() {
  const ReactionScope reaction(this);
  pipeline_.OnCancel();
}

void GetBlocksReactor::OnDone() {
  InReaction(this);
  watch_.Done();
  pipeline_.OnDone();
  ReleaseGrpcRef();
}

void GetBlocksReactor::StartWrite(const v1::GetBlocksResponse& fields, const Payload& data,
                                  bool last) {
  current_ = SerializeGetBlocksResponse(fields, data);
  if (last) {
    const grpc::Status ok = scope_.Complete(absl::OkStatus());
    HandedToGrpc(this);
    StartWriteAndFinish(&current_, grpc::WriteOptions(), ok);
    return;
  }
  HandedToGrpc(this);
  grpc::ServerWriteReactor<grpc::ByteBuffer>::StartWrite(&current_);
}

void GetBlocksReactor::Finish(const absl::Status& status) {
  const grpc::Status done = scope_.Complete(status);
  HandedToGrpc(this);
  grpc::ServerWriteReactor<grpc::ByteBuffer>::Finish(done);
}

void GetBlocksReactor::ArmTimer(std::chrono::steady_clock::time_point when) {
  watch_.Arm(when, [self = ReactorRef<GetBlocksReactor>(this)] {
    if (self->watch_.Fired()) self->pipeline_.OnTimer();
  });
}

void GetBlocksReactor::Cancel() { watch_.TryCancel(); }

std::shared_ptr<void> GetBlocksReactor::Pin() { return PinSelf(); }

}  // namespace turbokv::server
