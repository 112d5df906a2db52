// The turbokv.v1.TurboKV gRPC service (callback API). Handlers are thin: validate, call the
// store / registry (absl types), fill the response; RpcScope reports every call. Work that
// touches RocksDB or the codec runs on the worker pool, not on gRPC's threads.
#ifndef TURBOKV_SERVER_SERVICE_TURBOKV_SERVICE_H_
#define TURBOKV_SERVER_SERVICE_TURBOKV_SERVICE_H_

#include <functional>
#include <string>

#include "grpcpp/grpcpp.h"
#include "server/service/service_context.h"
#include "turbokv/v1/turbokv.grpc.pb.h"

namespace turbokv::server {

// GetBlocks and Lookup are raw callback methods: GetBlocks writes its responses as byte
// buffers, so payloads go out without a copy (get_blocks_reactor.h); Lookup reads its chain as
// views into the request's bytes (wire_format.h).
using TurboKvServiceBase = v1::TurboKV::WithCallbackMethod_RegisterNamespace<
    v1::TurboKV::WithCallbackMethod_PutBlocks<v1::TurboKV::WithRawCallbackMethod_Lookup<
        v1::TurboKV::WithRawCallbackMethod_GetBlocks<v1::TurboKV::WithCallbackMethod_DeleteBlocks<
            v1::TurboKV::WithCallbackMethod_DropNamespace<
                v1::TurboKV::WithCallbackMethod_Stats<v1::TurboKV::Service>>>>>>>;

class TurboKvService final : public TurboKvServiceBase {
 public:
  // `ctx` must outlive the service. `version` is reported by Stats.
  TurboKvService(ServiceContext* ctx, std::string version);

  grpc::ServerUnaryReactor* RegisterNamespace(grpc::CallbackServerContext* context,
                                              const v1::RegisterNamespaceRequest* request,
                                              v1::RegisterNamespaceResponse* response) override;
  grpc::ServerReadReactor<v1::PutBlocksRequest>* PutBlocks(
      grpc::CallbackServerContext* context, v1::PutBlocksResponse* response) override;
  // `request`: a serialized LookupRequest; `response`: gets a serialized LookupResponse.
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  // `request`: a serialized GetBlocksRequest; the responses are serialized GetBlocksResponses.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* GetBlocks(grpc::CallbackServerContext* context,
                                                        const grpc::ByteBuffer* request) override;
  grpc::ServerUnaryReactor* DeleteBlocks(grpc::CallbackServerContext* context,
                                         const v1::DeleteBlocksRequest* request,
                                         v1::DeleteBlocksResponse* response) override;
  grpc::ServerUnaryReactor* DropNamespace(grpc::CallbackServerContext* context,
                                          const v1::DropNamespaceRequest* request,
                                          v1::DropNamespaceResponse* response) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* context,
                                  const v1::StatsRequest* request,
                                  v1::StatsResponse* response) override;

 private:
  enum class Where { kInline, kPool };
  // The one wrapper of unary calls: shutdown check, authentication, running `fn` (with the
  // caller) inline or on the pool, and reporting through RpcScope.
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, RpcMethod method,
                                  Where where, std::function<absl::Status(const Principal&)> fn);

  ServiceContext* const ctx_;
  const std::string version_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_TURBOKV_SERVICE_H_
