// PutBlocks: reassembles chunked blocks from the client stream, encodes RAW blocks / validates
// PACKED ones on the worker pool, writes them in one WriteBatch per batch, and answers with one
// BlockResult per block in stream order.
//
// Per-block problems are per-block results (the RPC itself is OK): a hash outside 8..32 bytes,
// an encoding other than RAW/PACKED, block_bytes that is not the namespace's raw/packed size,
// chunks out of order or overrunning the block, a block cut short by the next block or by the
// end of the stream (INVALID_ARGUMENT; the block is not stored), a malformed packed block
// (INVALID_ARGUMENT or DATA_LOSS), no room (RESOURCE_EXHAUSTED).
// The RPC fails only when the stream as a whole is unusable: unknown namespace (NOT_FOUND),
// namespace_id changing within the stream (INVALID_ARGUMENT), shutdown (UNAVAILABLE). Blocks of
// a failed RPC may have been stored but are not acknowledged.
#ifndef TURBOKV_SERVER_SERVICE_PUT_BLOCKS_REACTOR_H_
#define TURBOKV_SERVER_SERVICE_PUT_BLOCKS_REACTOR_H_

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "server/service/service_context.h"
#include "turbokv/v1/turbokv.pb.h"

namespace turbokv::server {

// Validates a packed block against its namespace: parseable header, namespace id, header bytes
// equal to the namespace codec's header(), checksum. INVALID_ARGUMENT or DATA_LOSS.
[[nodiscard]] absl::Status ValidatePackedBlock(const Namespace& ns,
                                               absl::Span<const uint8_t> packed);

class PutBlocksReactor final : public grpc::ServerReadReactor<v1::PutBlocksRequest> {
 public:
  PutBlocksReactor(ServiceContext* ctx, v1::PutBlocksResponse* response);

  void OnReadDone(bool ok) override;
  void OnCancel() override {}
  void OnDone() override { delete this; }

 private:
  struct Block {
    size_t index = 0;  // position in results_
    std::string hash;
    v1::Encoding encoding = v1::ENCODING_UNSPECIFIED;
    uint64_t expected_bytes = 0;
    std::string data;
  };

  // All below require mu_.
  void HandleMessage(const v1::PutBlocksRequest& req);
  void StartBlock(const v1::PutBlocksRequest& req);
  void AppendChunk(const v1::PutBlocksRequest& req);
  size_t AddResult(const std::string& hash, const absl::Status& status);
  void FailCurrent(const absl::Status& status);
  void SubmitBatch();
  // True when the call should be finished now (and marks it finished).
  bool ReadyToFinish();
  void FinishNow();

  void RunBatch(std::vector<Block> blocks);  // on the pool

  ServiceContext* const ctx_;
  v1::PutBlocksResponse* const response_;
  RpcScope scope_;

  std::mutex mu_;
  v1::PutBlocksRequest request_;
  std::shared_ptr<const Namespace> ns_;
  std::optional<Block> current_;
  std::string skip_hash_;  // later chunks of a rejected block are dropped silently
  std::vector<Block> batch_;
  size_t batch_bytes_ = 0;
  std::vector<v1::BlockResult> results_;
  int in_flight_ = 0;
  bool paused_ = false;
  bool reading_done_ = false;
  bool finished_ = false;
  absl::Status fatal_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_PUT_BLOCKS_REACTOR_H_
