// turbokv-server: flags -> ServerOptions, start, wait for SIGTERM/SIGINT, shut down cleanly.
// The only place flags are parsed (STYLE.md "Options and metrics").
#include <cctype>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "CLI/CLI.hpp"
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
  return !ec;
}

}  // namespace

int main(int argc, char** argv) {
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
  add("--port-file", port_file,
      "Once serving, write the bound gRPC port to this file (first line) and the metrics port "
      "(second line, when metrics are enabled)");
  add("--data-dir", options.storage.data_dir, "RocksDB directory (created when missing)");
  add("--metrics-listen", options.metrics.listen_address,
      "Prometheus /metrics address HOST:PORT; port 0 picks a free port; \"\" disables");
  add("--capacity", capacity,
      "Hard budget on used bytes (packed values, keys, metadata): plain bytes or with a unit "
      "(KiB, MiB, GiB, TiB, KB, MB, GB, TB), e.g. 10GiB");
  add("--high-watermark", options.storage.high_watermark,
      "Evict when a put would exceed this fraction of --capacity")
      ->check(CLI::Range(0.01, 1.0));
  add("--low-watermark", options.storage.low_watermark,
      "Evict least recently used, unleased blocks down to this fraction")
      ->check(CLI::Range(0.01, 1.0));
  add("--durability", durability,
      "none: WAL off; wal: WAL, no fsync (survives a process crash); fsync: WAL fsync'ed before "
      "every ack")
      ->check(CLI::IsMember({"none", "wal", "fsync"}));
  add("--codec-backend", backend,
      "auto: CUDA when available, else CPU; cpu; cuda (startup fails when the CUDA backend is "
      "not available)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  add("--codec-threads", options.codec.threads,
      "Worker threads for codec and storage work; 0 = one per hardware thread")
      ->check(CLI::Range(0, 1024));
  add("--default-preset", options.codec.default_preset,
      "Codec preset of namespaces registered without one")
      ->check(CLI::IsMember(turbokv::codec::PresetNames()));
  add("--shutdown-grace-ms", options.shutdown_grace_ms,
      "On SIGTERM/SIGINT, in-flight calls get this long before they are cancelled")
      ->check(CLI::NonNegativeNumber);
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
  options.storage.durability = *turbokv::server::ParseDurability(durability);
  options.codec.backend = *turbokv::server::ParseCodecBackendKind(backend);

  // Block the shutdown signals in every thread (threads inherit the mask) and wait for them
  // below with sigwait, so no handler runs in an arbitrary thread.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = turbokv::server::Server::Start(options);
  if (!server.ok()) {
    spdlog::critical("turbokv-server failed to start: {}", server.status().ToString());
    return 1;
  }
  spdlog::info(
      "turbokv-server serving gRPC on {} (port {}), metrics {}, data dir {}, capacity {} "
      "(watermarks {:.2f}/{:.2f}), durability {}, codec backend {} ({}), {} codec threads, default "
      "preset {}; recovered {} namespaces and {} blocks",
      options.listen_address, (*server)->port(),
      (*server)->metrics_port() == 0 ? std::string("disabled")
                                     : options.metrics.listen_address + " (port " +
                                           std::to_string((*server)->metrics_port()) + ")",
      options.storage.data_dir, turbokv::server::FormatByteSize(options.storage.capacity_bytes),
      options.storage.low_watermark, options.storage.high_watermark, durability,
      (*server)->codec_backend(), (*server)->codec_backend_detail(),
      options.codec.threads == 0 ? std::string("auto") : std::to_string(options.codec.threads),
      options.codec.default_preset, (*server)->recovered_namespaces(),
      (*server)->recovered_blocks());

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
  sigwait(&signals, &signal);
  spdlog::info("received {}, shutting down (grace {} ms)", signal == SIGTERM ? "SIGTERM" : "SIGINT",
               options.shutdown_grace_ms);
  (*server)->Shutdown();
  spdlog::info("turbokv-server stopped");
  return 0;
}
