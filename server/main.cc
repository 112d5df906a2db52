// turbokv-server: flags -> ServerOptions, start, wait for SIGTERM/SIGINT, shut down cleanly.
// The only place flags are parsed.
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "server/server.h"
#include "server/server_options.h"
#include "spdlog/spdlog.h"
#include "turbokv/codec/types.h"

namespace {

using turbokv::server::ServerOptions;

// Writes `text` to `path` atomically (temp file + rename), so a reader never sees half of it.
bool WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    out << text;
    if (!out.flush()) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
  return !ec;
}

// At start-up, before the (possibly slow) recovery and before the data directory is created:
// removes a --port-file left by an earlier run, so a reader never takes its port for this
// server's, and checks that the file can be written (its temp file is created and removed).
// Returns "" or what went wrong.
std::string PreparePortFile(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove(path, ec);
  if (ec) return "cannot remove the old file: " + ec.message();
  const std::string tmp = path + ".tmp";
  errno = 0;
  if (!std::ofstream(tmp, std::ios::trunc)) {
    return std::string("cannot create ") + tmp + ": " +
           (errno != 0 ? std::strerror(errno) : "open failed");
  }
  std::filesystem::remove(tmp, ec);
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  // gRPC's mutexes are absl::Mutex, and Debian's Abseil is built with its debug-mode deadlock
  // detection on: every lock and unlock also updates a global lock graph (a few % of the
  // server's cycles per small RPC in a perf profile). turbokv's own locks are std::mutex.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // Defaults come from ServerOptions (server_options.h) and nowhere else: the text flags
  // below start as the struct's values, --help prints them, and every flag can also be set
  // through its environment variable (TURBOKV_<FLAG>), which is how the Kubernetes ConfigMap
  // overrides only what a deployment changes.
  ServerOptions options;
  std::string port_file;
  std::string capacity = turbokv::server::FormatByteSizeFlag(options.storage.capacity_bytes);
  std::string durability(turbokv::server::DurabilityName(options.storage.durability));
  std::string backend(turbokv::server::CodecBackendKindName(options.codec.backend));
  std::string log_level = "info";
  std::string max_block_bytes =
      turbokv::server::FormatByteSizeFlag(options.limits.max_block_bytes);
  std::string max_codec_setup_bytes =
      turbokv::server::FormatByteSizeFlag(options.limits.max_codec_setup_bytes);
  std::string max_in_flight_bytes =
      turbokv::server::FormatByteSizeFlag(options.limits.max_in_flight_bytes);
  std::string segment_bytes = turbokv::server::FormatByteSizeFlag(options.storage.segment_bytes);
  std::string default_tenant_quota =
      turbokv::server::FormatByteSizeFlag(options.auth.default_tenant_quota_bytes);

  CLI::App app{
      "turbokv-server: a KV-cache block store for LLM serving. Inference workers put KV blocks "
      "over gRPC (turbokv.v1.TurboKV); the server compresses them with TurboQuant, keeps them in "
      "an embedded RocksDB keyed by prefix hash, and serves them back packed or decoded. Every "
      "flag may also be given as the environment variable named after it (Env:...); a flag on "
      "the command line wins.",
      "turbokv-server"};
  app.option_defaults()->always_capture_default();
  app.set_version_flag("--version", "turbokv-server " TURBOKV_SERVER_VERSION);
  // --flag-name <-> TURBOKV_FLAG_NAME.
  auto add = [&app](const std::string& flag, auto& value, const std::string& help) {
    std::string env = "TURBOKV_" + flag.substr(2);
    for (char& ch : env) ch = ch == '-' ? '_' : static_cast<char>(std::toupper(ch));
    return app.add_option(flag, value, help)->envname(env);
  };
  add("--listen", options.listen_address,
      "gRPC address HOST:PORT; port 0 picks a free port (see --port-file)");
  add("--health-listen", options.health_listen_address,
      "Plaintext HOST:PORT serving only grpc.health.v1.Health (kubelet's gRPC probes cannot "
      "speak TLS); \"\" = health on --listen only");
  add("--port-file", port_file,
      "Once serving, write the bound gRPC port to this file (first line) and the metrics port "
      "(second line, when metrics are enabled). A file left at this path is removed at start-up "
      "(an unwritable path fails the start at once), and the file is removed on a clean "
      "shutdown");
  add("--data-dir", options.storage.data_dir,
      "Data directory (created when missing): the value log of packed blocks in values/, and "
      "the RocksDB of their metadata; its filesystem must deallocate file ranges (ext4, XFS, "
      "btrfs, tmpfs, f2fs, NFS 4.2)");
  add("--metrics-listen", options.metrics.listen_address,
      "Prometheus /metrics address HOST:PORT; port 0 picks a free port; \"\" disables");
  add("--kv-events-listen", options.kv_events.listen_address,
      "Publish the store's block events (stored, evicted, expired, deleted, namespace "
      "dropped) for KV-aware routers on a ZMQ PUB socket at HOST:PORT (an IP or *; port 0 "
      "picks a free one) or unix:PATH, in vLLM's KV-event schema (msgpack), one topic per "
      "namespace (docs/kv-events.md); \"\" = off. Unauthenticated: bind it to a trusted "
      "network");
  add("--capacity", capacity,
      "Hard budget on the data directory's bytes (the value log's page-aligned records of "
      "packed blocks and RocksDB's metadata files; only the disk reserve comes on top): plain "
      "bytes or with a unit (KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 10GiB");
  add("--high-watermark", options.storage.high_watermark,
      "Evict when a put would exceed this fraction of --capacity")
      ->check(CLI::Range(0.01, 1.0));
  add("--low-watermark", options.storage.low_watermark,
      "Evict the eviction policy's least valuable unleased blocks down to this fraction")
      ->check(CLI::Range(0.01, 1.0));
  add("--eviction-policy", options.storage.eviction_policy,
      "Which blocks go first when the store is full: lrfu (knows the prefix tree: a chain's "
      "tail before its head; recency and frequency weighed with a half-life it tunes itself; "
      "docs/cache.md) or lru (least recently used, in chain order)")
      ->check(CLI::IsMember({"lrfu", "lru"}));
  add("--segment-bytes", segment_bytes,
      "Size at which a value-log segment file is closed and the next one started (1MiB..4GiB)");
  add("--durability", durability,
      "none: WAL off; wal: WAL, no fsync (survives a process crash); fsync: WAL fsync'ed before "
      "every ack")
      ->check(CLI::IsMember({"none", "wal", "fsync"}));
  add("--codec-backend", backend,
      "auto: CUDA when available, else CPU; cpu; cuda (startup fails when the CUDA backend is "
      "not available)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  add("--codec-threads", options.codec.threads,
      "Codec worker threads (encode, decode, verify); 0 = the CPUs this process may "
      "use (CPU affinity, capped by the cgroup CPU quota)")
      ->check(CLI::Range(0, 1024));
  add("--io-threads", options.codec.io_threads,
      "Storage I/O threads (RocksDB reads and writes, apart from the codec threads); "
      "0 = max(4, 2 x CPUs)")
      ->check(CLI::Range(0, 1024));
  auto& lim = options.limits;
  add("--max-block-bytes", max_block_bytes,
      "Largest raw or packed block a namespace may have (checked at RegisterNamespace)");
  add("--max-codec-setup-bytes", max_codec_setup_bytes,
      "Most memory one namespace's codec tables may take (QJL matrices, sign masks)");
  add("--max-namespaces", lim.max_namespaces, "Most namespaces the server holds")
      ->check(CLI::PositiveNumber);
  add("--max-namespaces-per-tenant", lim.max_namespaces_per_tenant,
      "Most namespaces one tenant holds (so that no tenant fills --max-namespaces)")
      ->check(CLI::PositiveNumber);
  add("--max-descriptor-string-bytes", lim.max_descriptor_string_bytes,
      "Longest model, model_revision and cache_salt of a namespace descriptor")
      ->check(CLI::PositiveNumber);
  add("--max-lease-seconds", lim.max_lease_seconds, "Longest Lookup lease")
      ->check(CLI::PositiveNumber);
  add("--max-hashes-per-call", lim.max_hashes_per_call,
      "Most block hashes in one Lookup, GetBlocks or DeleteBlocks")
      ->check(CLI::PositiveNumber);
  add("--max-in-flight-bytes", max_in_flight_bytes,
      "Server-wide budget of request bytes in flight (put chunks not yet stored, get "
      "responses not yet sent); calls wait for it, then get RESOURCE_EXHAUSTED");
  add("--admission-timeout-ms", lim.admission_timeout_ms,
      "How long a call waits for in-flight budget before RESOURCE_EXHAUSTED")
      ->check(CLI::NonNegativeNumber);
  add("--tenant-in-flight-share", lim.tenant_in_flight_share,
      "The most of --max-in-flight-bytes one tenant's calls may hold (a fraction); the rest "
      "stays for the other tenants (with --token-file or --tls-client-ca; without, the one "
      "tenant has it all)")
      ->check(CLI::Range(0.001, 1.0));
  add("--stream-idle-timeout-ms", lim.stream_idle_timeout_ms,
      "A PutBlocks stream whose client sends nothing for this long is cancelled and its "
      "in-flight budget given back; 0 = never")
      ->check(CLI::NonNegativeNumber);
  add("--default-deadline-ms", lim.default_deadline_ms,
      "Deadline of calls whose client sets none (they are cancelled then); 0 = none")
      ->check(CLI::NonNegativeNumber);
  add("--max-queued-tasks", lim.max_queued_tasks,
      "Tasks that may wait in each worker pool's queue (more: RESOURCE_EXHAUSTED)")
      ->check(CLI::PositiveNumber);
  add("--max-stats-namespaces", lim.max_stats_namespaces,
      "Namespaces per Stats response (more are paged)")
      ->check(CLI::PositiveNumber);
  add("--default-preset", options.codec.default_preset,
      "Codec preset of namespaces registered without one")
      ->check(CLI::IsMember(turbokv::codec::PresetNames()));
  add("--shutdown-grace-ms", options.shutdown_grace_ms,
      "On SIGTERM/SIGINT, in-flight calls get this long before they are cancelled")
      ->check(CLI::NonNegativeNumber);
  auto& auth = options.auth;
  add("--tls-cert", auth.tls_cert,
      "PEM certificate chain of the gRPC port; with --tls-key the port speaks TLS only")
      ->check(CLI::ExistingFile);
  add("--tls-key", auth.tls_key, "PEM private key of --tls-cert")->check(CLI::ExistingFile);
  add("--tls-client-ca", auth.tls_client_ca,
      "PEM bundle of the CAs whose client certificates are accepted: mutual TLS, clients "
      "without such a certificate are refused")
      ->check(CLI::ExistingFile);
  add("--cert-refresh-seconds", auth.cert_refresh_seconds,
      "How often the certificate files are checked for changes (renewed certificates need no "
      "restart); SIGHUP re-reads them at once")
      ->check(CLI::Range(1, 86400));
  add("--token-file", auth.token_file,
      "Bearer tokens (as SHA-256), client-certificate identities, their tenants, roles and "
      "quotas (docs/server.md, Security); re-read on SIGHUP and when it changes")
      ->check(CLI::ExistingFile);
  add("--token-reload-ms", auth.token_reload_ms, "How often the token file is checked for changes")
      ->check(CLI::Range(50, 3600000));
  app.add_flag("--insecure-allow-remote", auth.insecure_allow_remote,
      "Without --token-file or --tls-client-ca, answer remote clients too (default: loopback "
      "only, \"protected mode\"); every client can then read and drop every namespace")
      ->envname("TURBOKV_INSECURE_ALLOW_REMOTE");
  add("--default-tenant-quota", default_tenant_quota,
      "Packed bytes a tenant may store when the token file gives it no quota; 0 = only "
      "--capacity");
  add("--log-level", log_level, "trace, debug, info, warn, error, critical, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  auto capacity_bytes = turbokv::server::ParseByteSize(capacity);
  if (!capacity_bytes.ok()) {
    spdlog::critical("--capacity: {}", std::string(capacity_bytes.status().message()));
    return 2;
  }
  options.storage.capacity_bytes = *capacity_bytes;
  for (auto [flag, text, out] :
       {std::tuple<const char*, std::string*, uint64_t*>{"--max-block-bytes", &max_block_bytes,
                                                         &options.limits.max_block_bytes},
        {"--max-codec-setup-bytes", &max_codec_setup_bytes, &options.limits.max_codec_setup_bytes},
        {"--max-in-flight-bytes", &max_in_flight_bytes, &options.limits.max_in_flight_bytes},
        {"--segment-bytes", &segment_bytes, &options.storage.segment_bytes},
        {"--default-tenant-quota", &default_tenant_quota,
         &options.auth.default_tenant_quota_bytes}}) {
    auto bytes = turbokv::server::ParseByteSize(*text);
    if (!bytes.ok()) {
      spdlog::critical("{}: {}", flag, std::string(bytes.status().message()));
      return 2;
    }
    *out = *bytes;
  }
  options.storage.durability = *turbokv::server::ParseDurability(durability);
  options.codec.backend = *turbokv::server::ParseCodecBackendKind(backend);

  // Block the shutdown signals in every thread (threads inherit the mask) and wait for them
  // below with sigwait, so no handler runs in an arbitrary thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (!port_file.empty()) {
    if (std::string error = PreparePortFile(port_file); !error.empty()) {
      spdlog::critical("--port-file {}: {}", port_file, error);
      return 1;
    }
  }

  auto server = turbokv::server::Server::Start(options);
  if (!server.ok()) {
    spdlog::critical("turbokv-server failed to start: {}", server.status().ToString());
    return 1;
  }
  spdlog::info(
      "turbokv-server serving gRPC on {} (port {}), metrics {}, data dir {}, capacity {} "
      "(watermarks {:.2f}/{:.2f}), durability {}, codec backend {} ({}), {} codec threads, {} I/O "
      "threads, in-flight budget {}, default preset {}; recovered {} namespaces and {} blocks",
      options.listen_address, (*server)->port(),
      (*server)->metrics_port() == 0 ? std::string("disabled")
                                     : options.metrics.listen_address + " (port " +
                                           std::to_string((*server)->metrics_port()) + ")",
      options.storage.data_dir, turbokv::server::FormatByteSize(options.storage.capacity_bytes),
      options.storage.low_watermark, options.storage.high_watermark, durability,
      (*server)->codec_backend(), (*server)->codec_backend_detail(),
      (*server)->codec_threads(), (*server)->io_threads(),
      turbokv::server::FormatByteSize(options.limits.max_in_flight_bytes),
      options.codec.default_preset, (*server)->recovered_namespaces(),
      (*server)->recovered_blocks());

  if (!(*server)->kv_events_endpoint().empty()) {
    spdlog::info("KV events published on {} (topics turbokv/<namespace id>)",
                 (*server)->kv_events_endpoint());
  }
  if ((*server)->health_port() != 0) {
    spdlog::info("plaintext health checks on {} (port {})", options.health_listen_address,
                 (*server)->health_port());
  }
  spdlog::info("gRPC port security: {}, authentication: {}",
               !auth.tls() ? "plaintext"
               : auth.tls_client_ca.empty() ? "TLS"
                                            : "mutual TLS",
               !auth.token_file.empty()    ? "token file " + auth.token_file
               : !auth.tls_client_ca.empty() ? std::string("client certificates")
               : auth.insecure_allow_remote  ? std::string("none (remote clients allowed)")
                                             : std::string("none (loopback clients only)"));

  if (!port_file.empty()) {
    std::string text = std::to_string((*server)->port()) + "\n";
    if ((*server)->metrics_port() != 0) text += std::to_string((*server)->metrics_port()) + "\n";
    if (!WriteFileAtomically(port_file, text)) {
      spdlog::critical("cannot write --port-file {}", port_file);
      (*server)->Shutdown();
      return 1;
    }
  }

  int signal = 0;
  for (;;) {
    sigwait(&signals, &signal);
    if (signal != SIGHUP) break;
    // SIGHUP: re-read the token file and the certificates (an error keeps the previous ones
    // and is logged).
    if (absl::Status s = (*server)->ReloadCredentials(); !s.ok()) continue;
  }
  spdlog::info("received {}, shutting down (grace {} ms)", signal == SIGTERM ? "SIGTERM" : "SIGINT",
               options.shutdown_grace_ms);
  (*server)->Shutdown();
  if (!port_file.empty()) {
    std::error_code ec;
    std::filesystem::remove(port_file, ec);
  }
  spdlog::info("turbokv-server stopped");
  return 0;
}
