// Every option of turbokv-server, with its default. main.cc fills it from flags; tests build it
// directly. One source of configuration: each field's default is its initializer here (or in
// the nested structs' headers); its flag, range, unit and help are written once, in the option
// tables (ServerOptionTable() and the tables it includes), from which both Validate() and the
// command line come.
#ifndef TURBOKV_SERVER_SERVER_OPTIONS_H_
#define TURBOKV_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/option_table.h"
#include "server/auth/auth_options.h"
#include "server/events/kv_event_options.h"
#include "server/storage/storage_options.h"

namespace turbokv::server {

enum class CodecBackendKind {
  kAuto,  // CUDA when this build has it and a device is present; otherwise the CPU codec.
  kCpu,   // the CPU codec (AVX2 when the CPU has it, else scalar)
  kCuda,  // the CUDA codec; startup fails when it is not available
};
[[nodiscard]] absl::StatusOr<CodecBackendKind> ParseCodecBackendKind(std::string_view name);
std::string_view CodecBackendKindName(CodecBackendKind kind);  // "auto", "cpu", "cuda"

struct CodecOptions {
  // Default: kAuto.
  CodecBackendKind backend = CodecBackendKind::kAuto;
  // Codec worker threads (encode, decode, verify; never gRPC's threads). 0: the CPUs this
  // process may use (its CPU affinity, capped by its cgroup CPU quota: AvailableCpus()).
  // Default: 0.
  int threads = 0;
  // Storage I/O threads (RocksDB reads and writes, separate from the codec threads so encodes
  // never wait behind disk I/O; several, so concurrent writes group-commit). 0: max(4,
  // 2 * AvailableCpus()). Default: 0.
  int io_threads = 0;
  // Preset of namespaces registered with an empty codec. Must be a codec preset name
  // (turbokv::codec::PresetNames()). Default: "k5v4" — the lowest-bpv preset whose perplexity
  // change in docs/quality.md's prefix-reuse evaluation is at most 0.5% (issue 12).
  std::string default_preset = "k5v4";

  [[nodiscard]] absl::Status Validate() const;
};

struct MetricsOptions {
  // HOST:PORT of the Prometheus /metrics endpoint; port 0 picks a free one; empty disables
  // it. Loopback unless configured (the Kubernetes manifests set 0.0.0.0:9464 for the
  // scraper). Default: "127.0.0.1:9464".
  std::string listen_address = "127.0.0.1:9464";
  // Period of the storage gauge refresh, milliseconds. Default: 1000.
  int refresh_interval_ms = 1000;
};

// Bounds on everything a client can make the server spend (docs/server.md, "Limits"). Past a
// bound the answer is RESOURCE_EXHAUSTED (INVALID_ARGUMENT at RegisterNamespace and for a
// lease that is too long), with a message naming the limit.
struct LimitOptions {
  // Largest raw block (namespace dtype) and largest packed block of a namespace, checked at
  // RegisterNamespace. Default: 256 MiB.
  uint64_t max_block_bytes = uint64_t{256} << 20;
  // Memory the codec of one namespace may take when it is set up (per section: SIMD sign
  // tables, and the g x g fp32 QJL projection of QJL sections), checked at RegisterNamespace.
  // Default: 64 MiB.
  uint64_t max_codec_setup_bytes = uint64_t{64} << 20;
  // Namespaces the server holds. Default: 4096.
  uint32_t max_namespaces = 4096;
  // Namespaces one tenant may hold (an admin registering without a tenant counts as the tenant
  // ""), so that no tenant can fill max_namespaces for the others. Default: 256.
  uint32_t max_namespaces_per_tenant = 256;
  // Longest model, model_revision and cache_salt of a descriptor, bytes. Default: 256.
  uint32_t max_descriptor_string_bytes = 256;
  // Longest Lookup lease, seconds. Default: 3600.
  uint32_t max_lease_seconds = 3600;
  // Most block hashes in one Lookup, GetBlocks or DeleteBlocks. Default: 16384.
  uint32_t max_hashes_per_call = 16384;
  // Server-wide budget of request bytes in flight (put chunks not yet written, get responses
  // not yet sent). Default: 1 GiB.
  uint64_t max_in_flight_bytes = uint64_t{1} << 30;
  // How long a call waits for in-flight budget before RESOURCE_EXHAUSTED, ms. Default: 10000.
  int admission_timeout_ms = 10000;
  // The most of max_in_flight_bytes the calls of one tenant may hold, a fraction: the
  // rest stays for the other tenants however many idle or slow streams one tenant opens.
  // Applies when the server authenticates (a token file or a client CA); without, every
  // caller is the one tenant "" and has the whole budget. Default: 0.5.
  double tenant_in_flight_share = 0.5;
  // A PutBlocks stream whose client sends nothing for this long while the server waits for its
  // next message is cancelled and its budget given back, ms; 0 = never. Default: 30000.
  int stream_idle_timeout_ms = 30000;
  // Deadline of calls whose client sets none, ms after the call starts (the call is cancelled
  // then); 0 = none. Default: 600000 (10 minutes).
  int default_deadline_ms = 600000;
  // Tasks that may wait in each worker pool's queue. Default: 4096.
  uint32_t max_queued_tasks = 4096;
  // Namespaces in one Stats response; more are paged (StatsRequest.page_after). Default: 256.
  uint32_t max_stats_namespaces = 256;

  [[nodiscard]] absl::Status Validate() const;
};

struct ServerOptions {
  // HOST:PORT of the gRPC endpoint; port 0 picks a free one. Default: "0.0.0.0:50051".
  std::string listen_address = "0.0.0.0:50051";
  // HOST:PORT of a plaintext port serving only grpc.health.v1.Health (for probes that cannot
  // speak TLS, such as kubelet's gRPC probes); empty: health only on listen_address.
  // Default: "".
  std::string health_listen_address;
  // On shutdown, in-flight calls get this long to finish before they are cancelled,
  // milliseconds. Default: 5000.
  int shutdown_grace_ms = 5000;
  // Largest gRPC message accepted. The API keeps every message below 4 MiB (chunks of at most
  // 1 MiB plus a small header); anything larger fails with RESOURCE_EXHAUSTED.
  // Default: 4 MiB.
  int max_receive_message_bytes = 4 << 20;
  StorageOptions storage;
  CodecOptions codec;
  MetricsOptions metrics;
  LimitOptions limits;
  AuthOptions auth;
  // The store's block events for routers (ZMQ, vLLM's KV-event schema); off by default.
  KvEventOptions kv_events;

  [[nodiscard]] absl::Status Validate() const;
};

// InvalidArgument unless `address` is HOST:PORT (IPv6 hosts in brackets) or unix:PATH; `flag`
// names it in the message.
[[nodiscard]] absl::Status ValidateListenAddress(std::string_view flag, std::string_view address);

// Every option of turbokv-server that has a flag or a range, in --help order: the top-level
// fields, then those of storage, codec, limits, metrics, kv_events and auth (their own tables,
// included). main.cc (server/server_flags.h) makes the flags from it; Validate() checks it.
const OptionTable<ServerOptions>& ServerOptionTable();

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVER_OPTIONS_H_
