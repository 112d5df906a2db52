#include "server/metrics/metrics.h"

#include "prometheus/family.h"

namespace turbokv::server {
namespace {

constexpr const char* kMethodNames[kNumRpcMethods] = {
    "RegisterNamespace", "PutBlocks",     "Lookup", "GetBlocks",
    "DeleteBlocks",      "DropNamespace", "Stats"};
constexpr const char* kCodeNames[kNumStatusCodes] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};
constexpr const char* kCodecOpNames[kNumCodecOps] = {"encode", "decode", "verify"};
constexpr const char* kCodecFallbackNames[kNumCodecFallbacks] = {"device_error", "degraded"};

int CodeIndex(absl::StatusCode code) {
  const int c = static_cast<int>(code);
  return c >= 0 && c < kNumStatusCodes ? c : static_cast<int>(absl::StatusCode::kUnknown);
}

// RPC latency buckets, 100 us .. 10 s.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1.0,    2.5,   5.0,  10.0};
}

void Advance(prometheus::Counter* counter, uint64_t total, uint64_t* seen) {
  if (total > *seen) counter->Increment(static_cast<double>(total - *seen));
  *seen = total;
}

}  // namespace

const char* RpcMethodName(RpcMethod method) { return kMethodNames[static_cast<int>(method)]; }

const char* StatusCodeName(absl::StatusCode code) { return kCodeNames[CodeIndex(code)]; }

Metrics::Metrics(prometheus::Registry& registry, const std::string& codec_backend,
                 uint64_t capacity_bytes, const std::string& cpu_codec_backend) {
  rpc_requests_family_ = &prometheus::BuildCounter()
                              .Name("turbokv_rpc_requests_total")
                              .Help("RPCs handled, by method and gRPC status code")
                              .Register(registry);
  rpc_duration_family_ = &prometheus::BuildHistogram()
                              .Name("turbokv_rpc_duration_seconds")
                              .Help("RPC handling time from the handler's start to Finish")
                              .Register(registry);

  auto& lookup_blocks = prometheus::BuildCounter()
                            .Name("turbokv_lookup_blocks_total")
                            .Help("Blocks asked for by Lookup: hit = in the matched prefix")
                            .Register(registry);
  lookup_blocks_hit_ = &lookup_blocks.Add({{"result", "hit"}});
  lookup_blocks_miss_ = &lookup_blocks.Add({{"result", "miss"}});
  auto& lookup_tokens = prometheus::BuildCounter()
                            .Name("turbokv_lookup_tokens_total")
                            .Help("Tokens asked for by Lookup: hit = in the matched prefix")
                            .Register(registry);
  lookup_tokens_hit_ = &lookup_tokens.Add({{"result", "hit"}});
  lookup_tokens_miss_ = &lookup_tokens.Add({{"result", "miss"}});

  put_blocks_family_ = &prometheus::BuildCounter()
                            .Name("turbokv_put_blocks_total")
                            .Help("Blocks received by PutBlocks, by per-block result code")
                            .Register(registry);
  auto& get = prometheus::BuildCounter()
                  .Name("turbokv_get_blocks_total")
                  .Help("Blocks asked for by GetBlocks")
                  .Register(registry);
  get_blocks_found_ = &get.Add({{"result", "found"}});
  get_blocks_missing_ = &get.Add({{"result", "missing"}});
  auto& reads = prometheus::BuildCounter()
                    .Name("turbokv_get_block_reads_total")
                    .Help(
                        "GetBlocks batch reads: inline = served from RocksDB's memory on the "
                        "calling thread, pool = read on the I/O pool")
                    .Register(registry);
  get_reads_inline_ = &reads.Add({{"path", "inline"}});
  get_reads_pool_ = &reads.Add({{"path", "pool"}});

  auto& codec_seconds = prometheus::BuildCounter()
                            .Name("turbokv_codec_seconds_total")
                            .Help("Time spent in the codec, by operation and backend")
                            .Register(registry);
  auto& codec_bytes = prometheus::BuildCounter()
                          .Name("turbokv_codec_bytes_total")
                          .Help("Raw (logical) bytes processed by the codec")
                          .Register(registry);
  const std::string& cpu = cpu_codec_backend.empty() ? codec_backend : cpu_codec_backend;
  for (int op = 0; op < kNumCodecOps; ++op) {
    const int c = static_cast<int>(CodecPath::kCpu), g = static_cast<int>(CodecPath::kCuda);
    codec_seconds_[c][op] = &codec_seconds.Add({{"op", kCodecOpNames[op]}, {"backend", cpu}});
    codec_bytes_[c][op] = &codec_bytes.Add({{"op", kCodecOpNames[op]}, {"backend", cpu}});
    const bool gpu = codec_backend != cpu;
    codec_seconds_[g][op] =
        gpu ? &codec_seconds.Add({{"op", kCodecOpNames[op]}, {"backend", codec_backend}})
            : codec_seconds_[c][op];
    codec_bytes_[g][op] =
        gpu ? &codec_bytes.Add({{"op", kCodecOpNames[op]}, {"backend", codec_backend}})
            : codec_bytes_[c][op];
  }
  auto& fallbacks =
      prometheus::BuildCounter()
          .Name("turbokv_codec_fallbacks_total")
          .Help("Codec batches meant for the CUDA codec that ran on the CPU, by reason")
          .Register(registry);
  for (int op = 0; op < kNumCodecOps; ++op) {
    for (int r = 0; r < kNumCodecFallbacks; ++r) {
      codec_fallbacks_[op][r] =
          &fallbacks.Add({{"op", kCodecOpNames[op]}, {"reason", kCodecFallbackNames[r]}});
    }
  }
  codec_degraded_ =
      &prometheus::BuildGauge()
           .Name("turbokv_codec_degraded")
           .Help("1 when the selected codec backend failed and the CPU codec runs instead")
           .Register(registry)
           .Add({});
  prometheus::BuildGauge()
      .Name("turbokv_codec_backend_info")
      .Help("The codec backend in use (value 1)")
      .Register(registry)
      .Add({{"backend", codec_backend}})
      .Set(1);

  auto gauge = [&registry](const char* name, const char* help) {
    return &prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
  };
  auto counter = [&registry](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
  };
  stored_bytes_ = gauge("turbokv_stored_bytes", "Packed value bytes of all stored blocks");
  used_bytes_ = gauge("turbokv_used_bytes",
                      "Bytes charged against the capacity (packed values, keys, metadata)");
  logical_bytes_ = gauge("turbokv_logical_bytes",
                         "Raw bytes the stored blocks represent in their namespace dtype");
  blocks_ = gauge("turbokv_blocks", "Blocks stored");
  capacity_bytes_ = gauge("turbokv_capacity_bytes", "Hard budget on used bytes");
  compression_ratio_ = gauge("turbokv_compression_ratio",
                             "turbokv_logical_bytes / turbokv_stored_bytes (0 when empty)");
  namespaces_ = gauge("turbokv_namespaces", "Registered namespaces");
  rocksdb_sst_bytes_ = gauge("turbokv_rocksdb_sst_bytes", "RocksDB SST files, all column families");
  value_log_bytes_ = gauge("turbokv_value_log_bytes",
                           "Allocated bytes of the value log's segment files (live records; "
                           "an evicted or deleted block's pages are deallocated at once)");
  value_log_segments_ = gauge("turbokv_value_log_segments", "Value-log segment files");
  index_memory_bytes_ = gauge("turbokv_index_memory_bytes",
                              "Memory of the in-memory block index and the eviction policy");
  read_cache_bytes_ = gauge("turbokv_read_cache_bytes",
                            "Packed blocks held by the read cache (--read-cache-bytes)");
  read_cache_hits_ = counter("turbokv_read_cache_hits_total",
                             "Block reads served from the read cache (no disk read or checksum)");
  read_cache_misses_ = counter("turbokv_read_cache_misses_total",
                               "Block reads that went to the value log (0 without a read cache)");
  rocksdb_pending_compaction_bytes_ =
      gauge("turbokv_rocksdb_pending_compaction_bytes", "RocksDB estimated pending compaction");
  evictions_ = counter("turbokv_evictions_total", "Blocks evicted to stay under capacity");
  evicted_bytes_ = counter("turbokv_evicted_bytes_total", "Charged bytes evicted");
  quota_evictions_ = counter("turbokv_quota_evictions_total",
                             "Blocks a tenant's puts evicted from its own to stay within its quota "
                             "(included in turbokv_evictions_total)");
  quota_evicted_bytes_ = counter("turbokv_quota_evicted_bytes_total",
                                 "Charged bytes of turbokv_quota_evictions_total");
  expirations_ = counter("turbokv_expired_blocks_total", "Blocks deleted by namespace TTL");
  checksum_failures_ = counter("turbokv_checksum_failures_total",
                               "Stored blocks that failed verification on read (deleted)");
  internal_failures_ = counter(
      "turbokv_internal_failures_total",
      "Exceptions caught by the request path's barrier (each failed one call with INTERNAL)");
  in_flight_bytes_ = gauge("turbokv_in_flight_bytes",
                           "Request bytes in flight (the --max-in-flight-bytes budget)");
  admission_rejections_ =
      counter("turbokv_admission_rejections_total",
              "Calls refused with RESOURCE_EXHAUSTED after waiting for the in-flight budget");
  stream_idle_timeouts_ = counter("turbokv_stream_idle_timeouts_total",
                                  "PutBlocks streams cancelled after their client sent nothing for "
                                  "--stream-idle-timeout-ms (their in-flight budget given back)");
  default_deadline_cancels_ =
      counter("turbokv_default_deadline_cancels_total",
              "Calls without a client deadline cancelled at the server's --default-deadline-ms");
  kv_events_published_ =
      counter("turbokv_kv_events_published_total",
              "Block events (a put's stored blocks, a removal, a namespace drop) sent on "
              "--kv-events-listen");
  kv_events_dropped_ =
      counter("turbokv_kv_events_dropped_total",
              "Block events dropped because the KV-event queue was full (subscribers see a "
              "sequence gap)");
  auto& repairs = prometheus::BuildGauge()
                      .Name("turbokv_repairs")
                      .Help(
                          "1 when the open repaired that part of a damaged data directory "
                          "(docs/faults.md)")
                      .Register(registry);
  repair_access_ = &repairs.Add({{"part", "access"}});
  repair_namespaces_ = &repairs.Add({{"part", "namespaces"}});
  repair_salvage_ = &repairs.Add({{"part", "salvage"}});
  repair_salvaged_blocks_ =
      gauge("turbokv_repair_salvaged_blocks",
            "Blocks a salvage of a damaged data directory recovered at start");
  repair_dropped_blocks_ = gauge("turbokv_repair_dropped_blocks",
                                 "Blocks the repair of a damaged data directory dropped at start");
  disk_bytes_ = gauge("turbokv_disk_bytes",
                      "Allocated bytes of all files in the data directory: the value log, "
                      "RocksDB's files, RESERVE (--capacity bounds all but RESERVE)");
  write_resumes_ = counter("turbokv_write_resumes_total",
                           "RocksDB write resumptions after a background error (a full disk)");
  capacity_bytes_->Set(static_cast<double>(capacity_bytes));
}

template <typename T, typename... Args>
T* Metrics::Child(std::atomic<T*>* slot, prometheus::Family<T>* family,
                  const std::map<std::string, std::string>& labels, Args&&... args) {
  T* child = slot->load(std::memory_order_acquire);
  if (child != nullptr) return child;
  std::lock_guard<std::mutex> l(child_mu_);
  child = slot->load(std::memory_order_relaxed);
  if (child == nullptr) {
    child = &family->Add(labels, std::forward<Args>(args)...);
    slot->store(child, std::memory_order_release);
  }
  return child;
}

void Metrics::RecordInternalFailure() { internal_failures_->Increment(); }

void Metrics::RecordStreamIdleTimeout() { stream_idle_timeouts_->Increment(); }

void Metrics::RecordDefaultDeadlineCancel() { default_deadline_cancels_->Increment(); }

void Metrics::UpdateAdmission(uint64_t in_flight_bytes, uint64_t rejections_total) {
  in_flight_bytes_->Set(static_cast<double>(in_flight_bytes));
  std::lock_guard<std::mutex> l(mu_);
  Advance(admission_rejections_, rejections_total, &seen_admission_rejections_);
}

void Metrics::UpdateKvEvents(uint64_t published_total, uint64_t dropped_total) {
  std::lock_guard<std::mutex> l(mu_);
  Advance(kv_events_published_, published_total, &seen_kv_events_published_);
  Advance(kv_events_dropped_, dropped_total, &seen_kv_events_dropped_);
}

void Metrics::RecordRpc(RpcMethod method, absl::StatusCode code, double seconds) {
  const int m = static_cast<int>(method);
  const int c = CodeIndex(code);
  Child(&rpc_requests_[m][c], rpc_requests_family_,
        {{"method", kMethodNames[m]}, {"code", kCodeNames[c]}})
      ->Increment();
  Child(&rpc_duration_[m], rpc_duration_family_, {{"method", kMethodNames[m]}}, LatencyBuckets())
      ->Observe(seconds);
}

void Metrics::RecordLookup(uint64_t requested, uint64_t matched, uint64_t block_tokens) {
  lookup_blocks_hit_->Increment(static_cast<double>(matched));
  lookup_blocks_miss_->Increment(static_cast<double>(requested - matched));
  lookup_tokens_hit_->Increment(static_cast<double>(matched * block_tokens));
  lookup_tokens_miss_->Increment(static_cast<double>((requested - matched) * block_tokens));
}

void Metrics::RecordPutBlock(absl::StatusCode code) {
  const int c = CodeIndex(code);
  Child(&put_blocks_[c], put_blocks_family_, {{"result", kCodeNames[c]}})->Increment();
}

void Metrics::RecordGetBlocks(uint64_t found, uint64_t missing) {
  get_blocks_found_->Increment(static_cast<double>(found));
  get_blocks_missing_->Increment(static_cast<double>(missing));
}

void Metrics::RecordGetBlocksRead(bool inline_read) {
  (inline_read ? get_reads_inline_ : get_reads_pool_)->Increment();
}

void Metrics::RecordCodec(CodecOp op, double seconds, uint64_t bytes) {
  RecordCodec(op, CodecPath::kCpu, seconds, bytes);
}

void Metrics::RecordCodec(CodecOp op, CodecPath path, double seconds, uint64_t bytes) {
  codec_seconds_[static_cast<int>(path)][static_cast<int>(op)]->Increment(seconds);
  codec_bytes_[static_cast<int>(path)][static_cast<int>(op)]->Increment(static_cast<double>(bytes));
}

void Metrics::RecordCodecFallback(CodecOp op, CodecFallback reason) {
  codec_fallbacks_[static_cast<int>(op)][static_cast<int>(reason)]->Increment();
}

void Metrics::SetCodecDegraded(bool degraded) { codec_degraded_->Set(degraded ? 1.0 : 0.0); }

void Metrics::UpdateStore(const StoreStats& stats, const DbStats& db) {
  stored_bytes_->Set(static_cast<double>(stats.value_bytes));
  used_bytes_->Set(static_cast<double>(stats.used_bytes));
  logical_bytes_->Set(static_cast<double>(stats.logical_bytes));
  blocks_->Set(static_cast<double>(stats.blocks));
  capacity_bytes_->Set(static_cast<double>(stats.capacity_bytes));
  compression_ratio_->Set(stats.value_bytes == 0 ? 0.0
                                                 : static_cast<double>(stats.logical_bytes) /
                                                       static_cast<double>(stats.value_bytes));
  namespaces_->Set(static_cast<double>(stats.namespaces.size()));
  rocksdb_sst_bytes_->Set(static_cast<double>(db.sst_bytes));
  value_log_bytes_->Set(static_cast<double>(db.value_log_bytes));
  value_log_segments_->Set(static_cast<double>(db.value_log_segments));
  index_memory_bytes_->Set(static_cast<double>(db.index_memory_bytes));
  rocksdb_pending_compaction_bytes_->Set(static_cast<double>(db.pending_compaction_bytes));
  repair_access_->Set(stats.repair.access_rebuilt ? 1 : 0);
  repair_namespaces_->Set(stats.repair.namespaces_rebuilt ? 1 : 0);
  repair_salvage_->Set(stats.repair.salvaged ? 1 : 0);
  repair_salvaged_blocks_->Set(static_cast<double>(stats.repair.salvaged_blocks));
  repair_dropped_blocks_->Set(static_cast<double>(stats.repair.dropped_blocks));
  disk_bytes_->Set(static_cast<double>(stats.disk_bytes));
  std::lock_guard<std::mutex> l(mu_);
  Advance(write_resumes_, stats.write_resumes, &seen_write_resumes_);
  Advance(evictions_, stats.evicted_blocks, &seen_evictions_);
  Advance(evicted_bytes_, stats.evicted_bytes, &seen_evicted_bytes_);
  Advance(quota_evictions_, stats.quota_evicted_blocks, &seen_quota_evictions_);
  Advance(quota_evicted_bytes_, stats.quota_evicted_bytes, &seen_quota_evicted_bytes_);
  Advance(expirations_, stats.expired_blocks, &seen_expirations_);
  Advance(checksum_failures_, stats.checksum_failures, &seen_checksum_failures_);
  read_cache_bytes_->Set(static_cast<double>(db.read_cache.bytes));
  Advance(read_cache_hits_, db.read_cache_hits, &seen_read_cache_hits_);
  Advance(read_cache_misses_, db.read_cache_misses, &seen_read_cache_misses_);
}

}  // namespace turbokv::server
