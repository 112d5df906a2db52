// Prometheus metrics of the server (docs/operations.md has the catalogue). Every family is
// created once, in the constructor. Label children whose value is known up front (hit/miss,
// op, backend) are created there too; the per-(method, code) and per-result children of the
// RPC and put families are created on first use, so an idle server exports real values, not
// hundreds of pre-created zeros. Labels are bounded (method, code, result, op, backend),
// never a namespace id or a hash.
//
// Thread safety: all methods are thread-safe.
#ifndef TURBOKV_SERVER_METRICS_METRICS_H_
#define TURBOKV_SERVER_METRICS_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"
#include "server/storage/block_store.h"

namespace turbokv::server {

enum class RpcMethod {
  kRegisterNamespace,
  kPutBlocks,
  kLookup,
  kGetBlocks,
  kDeleteBlocks,
  kDropNamespace,
  kStats,
};
inline constexpr int kNumRpcMethods = 7;
const char* RpcMethodName(RpcMethod method);  // "PutBlocks", ...

enum class CodecOp { kEncode, kDecode, kVerify };
inline constexpr int kNumCodecOps = 3;
// Which codec path did the work (the `backend` label of the codec metrics).
enum class CodecPath { kCpu, kCuda };
// Why a batch meant for the CUDA codec ran on the CPU (turbokv_codec_fallbacks_total{reason}):
// the device call failed ("device_error"), or an earlier failure disabled the CUDA codec
// ("degraded").
enum class CodecFallback { kDeviceError, kDegraded };
inline constexpr int kNumCodecFallbacks = 2;

// google.rpc.Code values 0..16.
inline constexpr int kNumStatusCodes = 17;
// "OK", "INVALID_ARGUMENT", ... (the gRPC spelling).
const char* StatusCodeName(absl::StatusCode code);

class Metrics {
 public:
  // Registers every family in `registry`. `codec_backend` ("cpu-avx2", "cuda", ...) is the
  // selected backend (turbokv_codec_backend_info); `cpu_codec_backend` the CPU path's name, the
  // label of codec work done on the CPU (empty: codec_backend, which must then be a CPU path).
  Metrics(prometheus::Registry& registry, const std::string& codec_backend, uint64_t capacity_bytes,
          const std::string& cpu_codec_backend = "");
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  void RecordRpc(RpcMethod method, absl::StatusCode code, double seconds);
  // Lookup outcome: `requested` hashes of which the leading `matched` are stored.
  void RecordLookup(uint64_t requested, uint64_t matched, uint64_t block_tokens);
  // Per-block PutBlocks outcome.
  void RecordPutBlock(absl::StatusCode code);
  void RecordGetBlocks(uint64_t found, uint64_t missing);
  // One batch read of GetBlocks: inline (from RocksDB's memory, on the calling thread) or on
  // the I/O pool (turbokv_get_block_reads_total{path}).
  void RecordGetBlocksRead(bool inline_read);
  // Codec work on the CPU path.
  void RecordCodec(CodecOp op, double seconds, uint64_t bytes);
  // An exception caught by a reactor's or a pool task's barrier (a bug: that call failed with
  // INTERNAL). turbokv_internal_failures_total.
  void RecordInternalFailure();
  // The in-flight budget: bytes in use (turbokv_in_flight_bytes) and calls refused after
  // waiting (turbokv_admission_rejections_total, advanced to the running total).
  void UpdateAdmission(uint64_t in_flight_bytes, uint64_t rejections_total);
  // A put stream cancelled because its client sent nothing for --stream-idle-timeout-ms
  // (turbokv_stream_idle_timeouts_total).
  void RecordStreamIdleTimeout();
  // A call whose client set no deadline, cancelled at the server's --default-deadline-ms
  // (turbokv_default_deadline_cancels_total).
  void RecordDefaultDeadlineCancel();
  // The KV-event publisher's running totals of events sent and dropped
  // (turbokv_kv_events_published_total, turbokv_kv_events_dropped_total).
  void UpdateKvEvents(uint64_t published_total, uint64_t dropped_total);
  // Codec work on `path` (kCuda only when the selected backend is CUDA; else counted as CPU).
  void RecordCodec(CodecOp op, CodecPath path, double seconds, uint64_t bytes);
  void RecordCodecFallback(CodecOp op, CodecFallback reason);
  void SetCodecDegraded(bool degraded);
  // Refreshes the storage gauges and advances the storage counters to the store's totals.
  void UpdateStore(const StoreStats& stats, const DbStats& db);

 private:
  // The child of `family` for `labels`, created on first use and cached in *slot.
  template <typename T, typename... Args>
  T* Child(std::atomic<T*>* slot, prometheus::Family<T>* family,
           const std::map<std::string, std::string>& labels, Args&&... args);

  prometheus::Family<prometheus::Counter>* rpc_requests_family_;
  prometheus::Family<prometheus::Histogram>* rpc_duration_family_;
  prometheus::Family<prometheus::Counter>* put_blocks_family_;
  std::array<std::array<std::atomic<prometheus::Counter*>, kNumStatusCodes>, kNumRpcMethods>
      rpc_requests_{};
  std::array<std::atomic<prometheus::Histogram*>, kNumRpcMethods> rpc_duration_{};
  prometheus::Counter* lookup_blocks_hit_;
  prometheus::Counter* lookup_blocks_miss_;
  prometheus::Counter* lookup_tokens_hit_;
  prometheus::Counter* lookup_tokens_miss_;
  std::array<std::atomic<prometheus::Counter*>, kNumStatusCodes> put_blocks_{};
  prometheus::Counter* get_blocks_found_;
  prometheus::Counter* get_blocks_missing_;
  prometheus::Counter* get_reads_inline_;
  prometheus::Counter* get_reads_pool_;
  // [path][op]; the kCuda row points at the kCpu one unless the selected backend is CUDA.
  std::array<std::array<prometheus::Counter*, kNumCodecOps>, 2> codec_seconds_{};
  std::array<std::array<prometheus::Counter*, kNumCodecOps>, 2> codec_bytes_{};
  std::array<std::array<prometheus::Counter*, kNumCodecFallbacks>, kNumCodecOps> codec_fallbacks_{};
  prometheus::Gauge* codec_degraded_;
  prometheus::Gauge* stored_bytes_;
  prometheus::Gauge* used_bytes_;
  prometheus::Gauge* logical_bytes_;
  prometheus::Gauge* blocks_;
  prometheus::Gauge* capacity_bytes_;
  prometheus::Gauge* compression_ratio_;
  prometheus::Gauge* namespaces_;
  prometheus::Gauge* rocksdb_sst_bytes_;
  prometheus::Gauge* value_log_bytes_;
  prometheus::Gauge* value_log_segments_;
  prometheus::Gauge* index_memory_bytes_;
  prometheus::Gauge* read_cache_bytes_;
  prometheus::Counter* read_cache_hits_;
  prometheus::Counter* read_cache_misses_;
  prometheus::Gauge* rocksdb_pending_compaction_bytes_;
  prometheus::Counter* evictions_;
  prometheus::Counter* evicted_bytes_;
  prometheus::Counter* quota_evictions_;
  prometheus::Counter* quota_evicted_bytes_;
  prometheus::Counter* expirations_;
  prometheus::Counter* checksum_failures_;
  prometheus::Gauge* repair_access_;
  prometheus::Gauge* repair_namespaces_;
  prometheus::Gauge* repair_salvage_;
  prometheus::Gauge* repair_salvaged_blocks_;
  prometheus::Gauge* repair_dropped_blocks_;
  prometheus::Gauge* disk_bytes_;
  prometheus::Counter* write_resumes_;
  prometheus::Counter* internal_failures_;
  prometheus::Gauge* in_flight_bytes_;
  prometheus::Counter* admission_rejections_;
  prometheus::Counter* stream_idle_timeouts_;
  prometheus::Counter* default_deadline_cancels_;
  prometheus::Counter* kv_events_published_;
  prometheus::Counter* kv_events_dropped_;

  std::mutex child_mu_;  // serializes the creation of lazy children
  std::mutex mu_;        // guards the last-seen store totals below
  uint64_t seen_evictions_ = 0;
  uint64_t seen_evicted_bytes_ = 0;
  uint64_t seen_quota_evictions_ = 0;
  uint64_t seen_quota_evicted_bytes_ = 0;
  uint64_t seen_expirations_ = 0;
  uint64_t seen_checksum_failures_ = 0;
  uint64_t seen_read_cache_hits_ = 0;
  uint64_t seen_read_cache_misses_ = 0;
  uint64_t seen_write_resumes_ = 0;
  uint64_t seen_admission_rejections_ = 0;
  uint64_t seen_kv_events_published_ = 0;
  uint64_t seen_kv_events_dropped_ = 0;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_METRICS_METRICS_H_
