// turbokv-server: flags -> ServerOptions, start, wait for SIGTERM/SIGINT, shut down cleanly.
// The only place flags are parsed (their definitions: server/server_flags.h).
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/synchronization/mutex.h"
#include "common/byte_size.h"
#include "server/server.h"
#include "server/server_flags.h"
#include "server/server_options.h"
#include "spdlog/spdlog.h"

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
  // Defaults come from ServerOptions (server_options.h) and nowhere else; each flag's range,
  // unit and help from the option table (ServerOptionTable(), server/server_flags.h), which
  // parses it straight into `options` (sizes such as 10GiB included). Every flag can also be
  // set through its environment variable (TURBOKV_<FLAG>), which is how the Kubernetes
  // ConfigMap overrides only what a deployment changes.
  ServerOptions options;
  std::string port_file;
  std::string log_level = "info";

  CLI::App app{
      "turbokv-server: a KV-cache block store for LLM serving. Inference workers put KV blocks "
      "over gRPC (turbokv.v1.TurboKV); the server compresses them with TurboQuant, keeps them in "
      "an embedded RocksDB keyed by prefix hash, and serves them back packed or decoded. Every "
      "flag may also be given as the environment variable named after it (Env:...); a flag on "
      "the command line wins. SIZE: bytes, or with a unit (KiB, MiB, GiB, TiB; KB, MB, GB, TB "
      "decimal), e.g. 10GiB.",
      "turbokv-server"};
  app.set_version_flag("--version", "turbokv-server " TURBOKV_SERVER_VERSION);
  turbokv::server::AddServerFlags(app, &options);
  // Two flags of the process rather than of the server.
  app.add_option("--port-file", port_file,
                 "Once serving, write the bound gRPC port to this file (first line) and the "
                 "metrics port (second line, when metrics are enabled). A file left at this path "
                 "is removed at start-up (an unwritable path fails the start at once), and the "
                 "file is removed on a clean shutdown")
      ->type_name("PATH")
      ->envname(turbokv::server::FlagEnvName("--port-file"));
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical, off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str()
      ->envname(turbokv::server::FlagEnvName("--log-level"));
  CLI11_PARSE(app, argc, argv);

  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

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
      options.storage.data_dir, turbokv::FormatByteSize(options.storage.capacity_bytes),
      options.storage.low_watermark, options.storage.high_watermark,
      turbokv::server::DurabilityName(options.storage.durability), (*server)->codec_backend(),
      (*server)->codec_backend_detail(), (*server)->codec_threads(), (*server)->io_threads(),
      turbokv::FormatByteSize(options.limits.max_in_flight_bytes), options.codec.default_preset,
      (*server)->recovered_namespaces(), (*server)->recovered_blocks());

  if (!(*server)->kv_events_endpoint().empty()) {
    spdlog::info("KV events published on {} (topics turbokv/<namespace id>)",
                 (*server)->kv_events_endpoint());
  }
  if ((*server)->health_port() != 0) {
    spdlog::info("plaintext health checks on {} (port {})", options.health_listen_address,
                 (*server)->health_port());
  }
  const auto& auth = options.auth;
  spdlog::info("gRPC port security: {}, authentication: {}",
               !auth.tls()                  ? "plaintext"
               : auth.tls_client_ca.empty() ? "TLS"
                                            : "mutual TLS",
               !auth.token_file.empty()      ? "token file " + auth.token_file
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
