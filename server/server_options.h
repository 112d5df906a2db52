// Every option of turbokv-server, with its default (STYLE.md "Options and metrics"). main.cc
// fills it from flags; tests build it directly. One source of configuration.
#ifndef TURBOKV_SERVER_SERVER_OPTIONS_H_
#define TURBOKV_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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
  // Worker threads for codec and storage work (never gRPC's threads). 0: one per hardware
  // thread. Range 0..1024. Default: 0.
  int threads = 0;
  // Preset of namespaces registered with an empty codec. Must be a codec preset name
  // (turbokv::codec::PresetNames()). Default: "k4v4-g32".
  std::string default_preset = "k4v4-g32";

  [[nodiscard]] absl::Status Validate() const;
};

struct MetricsOptions {
  // HOST:PORT of the Prometheus /metrics endpoint; port 0 picks a free one; empty disables
  // it. Default: "0.0.0.0:9464".
  std::string listen_address = "0.0.0.0:9464";
  // Period of the storage gauge refresh, milliseconds (>= 10). Default: 1000.
  int refresh_interval_ms = 1000;
};

struct ServerOptions {
  // HOST:PORT of the gRPC endpoint; port 0 picks a free one. Default: "0.0.0.0:50051".
  std::string listen_address = "0.0.0.0:50051";
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

  [[nodiscard]] absl::Status Validate() const;
};

// "10GiB", "512MiB", "1.5TiB", "100MB" (decimal), "4096" (bytes). Units: B, KiB, MiB, GiB,
// TiB, KB, MB, GB, TB (case-insensitive; K/M/G/T alone are binary). InvalidArgument otherwise.
[[nodiscard]] absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);
// 10737418240 -> "10 GiB" (for logs).
std::string FormatByteSize(uint64_t bytes);
// Exact and parseable by ParseByteSize: 10737418240 -> "10GiB", 1000 -> "1000" (for flags).
std::string FormatByteSizeFlag(uint64_t bytes);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVER_OPTIONS_H_
