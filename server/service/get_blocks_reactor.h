// GetBlocks: the gRPC adapter of the get pipeline (get_pipeline.h: fetch -> decode -> write;
// its contract, errors and memory bounds are there). The reactor parses the request, moves
// gRPC's events into the pipeline (OnWriteDone, OnCancel, OnDone) and its writes out, arms the
// call's watchdog entry for the server's default deadline (call_watch.h) and reports the RPC.
//
// The request arrives and the responses leave as gRPC byte buffers (the raw callback method):
// a message's `data` is a slice over the stored value or the decode buffer (wire_format.h),
// so no payload byte is copied or zero-filled between RocksDB and the socket. The last message
// of a call is written together with the call's status (StartWriteAndFinish): a reply of one
// message is one write operation.
//
// Owned by gRPC and by the pipeline's pending pool tasks and budget callback (Pin; reactor_ref.h):
// deleted when OnDone and the last of them have let go.
#ifndef TURBOKV_SERVER_SERVICE_GET_BLOCKS_REACTOR_H_
#define TURBOKV_SERVER_SERVICE_GET_BLOCKS_REACTOR_H_

#include <chrono>
#include <memory>

#include "grpcpp/grpcpp.h"
#include "server/service/call_watch.h"
#include "server/service/get_pipeline.h"
#include "server/service/reactor_ref.h"
#include "server/service/service_context.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::server {

class GetBlocksReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                               public RefCountedReactor,
                               private GetPipeline::Host {
 public:
  // `request`: a serialized GetBlocksRequest. `caller`: the authenticated caller (namespaces
  // of other tenants are unknown to it).
  GetBlocksReactor(ServiceContext* ctx, grpc::CallbackServerContext* context,
                   const grpc::ByteBuffer* request, const Principal& caller);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // GetPipeline::Host.
  void StartWrite(const v1::GetBlocksResponse& fields, const Payload& data, bool last) override;
  void Finish(const absl::Status& status) override;
  void ArmTimer(std::chrono::steady_clock::time_point when) override;
  void Cancel() override;
  std::shared_ptr<void> Pin() override;

  ServiceContext* const ctx_;
  RpcScope scope_;
  CallWatch watch_;
  grpc::ByteBuffer current_;  // the message being written
  GetPipeline pipeline_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_GET_BLOCKS_REACTOR_H_
