// GetBlocks: reads blocks in batches (one MultiGet each) on the worker pool, decodes them when
// RAW is asked for, and streams one message per chunk (<= 1 MiB) or per missing block, in
// request order. The next batch is fetched while the current one is being written.
//
// RPC errors: NOT_FOUND (unknown namespace), INVALID_ARGUMENT (encoding, dtype, layer range,
// a hash outside 8..32 bytes), UNAVAILABLE (shutdown), INTERNAL (a verified block that does
// not decode). A missing, expired or corrupt block is a `found: false` message.
#ifndef TURBOKV_SERVER_SERVICE_GET_BLOCKS_REACTOR_H_
#define TURBOKV_SERVER_SERVICE_GET_BLOCKS_REACTOR_H_

#include <deque>
#include <memory>
#include <mutex>

#include "grpcpp/grpcpp.h"
#include "server/service/service_context.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::server {

// Largest `data` of one GetBlocksResponse.
inline constexpr size_t kMaxResponseChunkBytes = size_t{1} << 20;

class GetBlocksReactor final : public grpc::ServerWriteReactor<v1::GetBlocksResponse> {
 public:
  GetBlocksReactor(ServiceContext* ctx, const v1::GetBlocksRequest* request);

  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override { delete this; }

 private:
  [[nodiscard]] absl::Status Prepare();
  void Fetch();  // on the pool
  // Starts the next write, schedules a fetch, or finishes. Requires mu_; releases it.
  void Pump(std::unique_lock<std::mutex>& l);

  ServiceContext* const ctx_;
  const v1::GetBlocksRequest* const request_;
  RpcScope scope_;
  std::shared_ptr<const Namespace> ns_;
  v1::Encoding encoding_ = v1::ENCODING_PACKED;
  codec::DType out_dtype_ = codec::DType::kFloat16;
  codec::LayerRange range_;
  size_t decoded_bytes_ = 0;  // RAW: bytes of one decoded block

  std::mutex mu_;
  std::deque<v1::GetBlocksResponse> queue_;
  size_t queued_bytes_ = 0;
  v1::GetBlocksResponse current_;
  size_t next_ = 0;  // first request index not fetched yet
  bool fetching_ = false;
  bool writing_ = false;
  bool cancelled_ = false;
  bool finished_ = false;
  absl::Status error_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_GET_BLOCKS_REACTOR_H_
