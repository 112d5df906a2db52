// PutBlocks: the gRPC adapter of the put pipeline (put_pipeline.h: read -> assemble -> encode
// -> commit; its contract, errors and memory bounds are there). The reactor only moves gRPC's
// events into the pipeline (OnReadDone -> OnRead, OnCancel) and the pipeline's requests out
// (StartRead, Finish), arms the call's watchdog entry (call_watch.h: idle timeout, default
// deadline) and reports the RPC (RpcScope).
//
// Owned by gRPC and by the pipeline's pending pool tasks and budget callback (Pin; reactor_ref.h):
// deleted when OnDone and the last of them have let go.
#ifndef TURBOKV_SERVER_SERVICE_PUT_BLOCKS_REACTOR_H_
#define TURBOKV_SERVER_SERVICE_PUT_BLOCKS_REACTOR_H_

#include <chrono>
#include <memory>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "server/service/call_watch.h"
#include "server/service/put_pipeline.h"
#include "server/service/reactor_ref.h"
#include "server/service/service_context.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::server {

class PutBlocksReactor final : public grpc::ServerReadReactor<v1::PutBlocksRequest>,
                               public RefCountedReactor,
                               private PutPipeline::Host {
 public:
  // `caller`: the authenticated caller (namespaces of other tenants are unknown to it).
  PutBlocksReactor(ServiceContext* ctx, grpc::CallbackServerContext* context,
                   v1::PutBlocksResponse* response, const Principal& caller);

  void OnReadDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // PutPipeline::Host.
  void StartRead(v1::PutBlocksRequest* into) override;
  void Finish(const absl::Status& status, std::vector<v1::BlockResult> results) override;
  void ArmTimer(std::chrono::steady_clock::time_point when) override;
  void Cancel() override;
  std::shared_ptr<void> Pin() override;

  ServiceContext* const ctx_;
  v1::PutBlocksResponse* const response_;
  RpcScope scope_;
  CallWatch watch_;
  PutPipeline pipeline_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_PUT_BLOCKS_REACTOR_H_
