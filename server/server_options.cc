#include "server/server_options.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <thread>
#include <sched.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "turbokv/codec/status_macros.h"
#include "turbokv/codec/types.h"

namespace turbokv::server {

absl::StatusOr<CodecBackendKind> ParseCodecBackendKind(std::string_view name) {
  if (name == "auto") return CodecBackendKind::kAuto;
  if (name == "cpu") return CodecBackendKind::kCpu;
  if (name == "cuda") return CodecBackendKind::kCuda;
  return absl::InvalidArgumentError(
      absl::StrCat("codec backend \"", std::string(name), "\" is not one of auto, cpu, cuda"));
}

std::string_view CodecBackendKindName(CodecBackendKind kind) {
  switch (kind) {
    case CodecBackendKind::kCpu:
      return "cpu";
    case CodecBackendKind::kCuda:
      return "cuda";
    default:
      return "auto";
  }
}

absl::Status CodecOptions::Validate() const {
  if (threads < 0 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec.threads ", threads, " is outside 0..1024"));
  }
  if (io_threads < 0 || io_threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("codec.io_threads ", io_threads, " is outside 0..1024"));
  }
  const auto& names = codec::PresetNames();
  if (std::find(names.begin(), names.end(), default_preset) == names.end()) {
    return absl::InvalidArgumentError(absl::StrCat("codec.default_preset \"", default_preset,
                                                   "\" is not one of ",
                                                   absl::StrJoin(names, ", ")));
  }
  return absl::OkStatus();
}

absl::Status LimitOptions::Validate() const {
  if (max_block_bytes < 4096 || max_block_bytes > (uint64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.max_block_bytes ", max_block_bytes, " is outside 4 KiB..1 GiB"));
  }
  if (max_codec_setup_bytes < (uint64_t{1} << 20)) {
    return absl::InvalidArgumentError("limits.max_codec_setup_bytes must be >= 1 MiB");
  }
  if (max_namespaces < 1 || max_namespaces_per_tenant < 1 || max_descriptor_string_bytes < 1 ||
      max_lease_seconds < 1 ||
      max_hashes_per_call < 1 || max_queued_tasks < 1 || max_stats_namespaces < 1) {
    return absl::InvalidArgumentError(
        "limits: max_namespaces, max_namespaces_per_tenant, max_descriptor_string_bytes, "
        "max_lease_seconds, "
        "max_hashes_per_call, max_queued_tasks and max_stats_namespaces must be >= 1");
  }
  if (max_in_flight_bytes < (uint64_t{4} << 20)) {
    return absl::InvalidArgumentError("limits.max_in_flight_bytes must be >= 4 MiB");
  }
  if (admission_timeout_ms < 0) {
    return absl::InvalidArgumentError("limits.admission_timeout_ms must be >= 0");
  }
  if (!(tenant_in_flight_share > 0.0 && tenant_in_flight_share <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("limits.tenant_in_flight_share ",
                                                   tenant_in_flight_share,
                                                   " is outside (0, 1]"));
  }
  if (stream_idle_timeout_ms < 0 || default_deadline_ms < 0) {
    return absl::InvalidArgumentError(
        "limits.stream_idle_timeout_ms and limits.default_deadline_ms must be >= 0");
  }
  return absl::OkStatus();
}

int AvailableCpus() {
  int cpus = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = CPU_COUNT(&set);
  double quota_cpus = 0;  // 0 = no quota
  {
    std::ifstream v2("/sys/fs/cgroup/cpu.max");  // "max 100000" or "150000 100000"
    std::string quota;
    double period = 0;
    if (v2 >> quota >> period && quota != "max" && period > 0) {
      quota_cpus = std::strtod(quota.c_str(), nullptr) / period;
    }
  }
  if (quota_cpus == 0) {
    std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us");
    std::ifstream p("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
    double quota = 0, period = 0;
    if (q >> quota && p >> period && quota > 0 && period > 0) quota_cpus = quota / period;
  }
  if (quota_cpus > 0) cpus = std::min(cpus, static_cast<int>(std::ceil(quota_cpus)));
  return std::max(1, cpus);
}

absl::Status ValidateListenAddress(std::string_view flag, std::string_view address) {
  if (address.substr(0, 5) == "unix:") return absl::OkStatus();
  const size_t colon = address.rfind(':');
  const std::string_view host =
      colon == std::string_view::npos ? address : address.substr(0, colon);
  const std::string_view port =
      colon == std::string_view::npos ? std::string_view() : address.substr(colon + 1);
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  const bool port_ok = !port.empty() && port.size() <= 5 &&
                       std::all_of(port.begin(), port.end(),
                                   [](char c) { return c >= '0' && c <= '9'; }) &&
                       std::stoi(std::string(port)) <= 65535;
  if (host.empty() || !port_ok || (host.find(':') != std::string_view::npos && !bracketed)) {
    // gRPC would take a missing port as 443: say so instead of serving somewhere unexpected.
    return absl::InvalidArgumentError(absl::StrCat(
        std::string(flag), " \"", std::string(address),
        "\" is not HOST:PORT (an IPv6 host in brackets, [::1]:50051; port 0 picks a free one)"));
  }
  return absl::OkStatus();
}

absl::Status ServerOptions::Validate() const {
  if (listen_address.empty()) {
    return absl::InvalidArgumentError("listen_address must be HOST:PORT, got an empty string");
  }
  TURBOKV_RETURN_IF_ERROR(ValidateListenAddress("listen_address", listen_address));
  if (!health_listen_address.empty()) {
    TURBOKV_RETURN_IF_ERROR(ValidateListenAddress("health_listen_address",
                                                  health_listen_address));
  }
  if (!metrics.listen_address.empty()) {
    TURBOKV_RETURN_IF_ERROR(ValidateListenAddress("metrics.listen_address",
                                                  metrics.listen_address));
  }
  TURBOKV_RETURN_IF_ERROR(kv_events.Validate());
  if (shutdown_grace_ms < 0) {
    return absl::InvalidArgumentError("shutdown_grace_ms must be >= 0");
  }
  if (max_receive_message_bytes < (1 << 20) + 4096) {
    return absl::InvalidArgumentError(
        "max_receive_message_bytes must leave room for a 1 MiB chunk and its header");
  }
  if (metrics.refresh_interval_ms < 10) {
    return absl::InvalidArgumentError("metrics.refresh_interval_ms must be >= 10");
  }
  TURBOKV_RETURN_IF_ERROR(storage.Validate());
  TURBOKV_RETURN_IF_ERROR(limits.Validate());
  TURBOKV_RETURN_IF_ERROR(auth.Validate());
  return codec.Validate();
}

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  std::string s(absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size())));
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string number = s.substr(0, i);
  const std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(i)));
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("byte size \"", std::string(text),
                     "\" is not a number with an optional unit (B, KiB, MiB, GiB, TiB, "
                     "KB, MB, GB, TB), e.g. 10GiB"));
  };
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1) return bad();
  double multiplier = 0;
  if (unit.empty() || unit == "b")
    multiplier = 1;
  else if (unit == "k" || unit == "kib")
    multiplier = 1024.0;
  else if (unit == "m" || unit == "mib")
    multiplier = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib")
    multiplier = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib")
    multiplier = 1024.0 * 1024 * 1024 * 1024;
  else if (unit == "kb")
    multiplier = 1e3;
  else if (unit == "mb")
    multiplier = 1e6;
  else if (unit == "gb")
    multiplier = 1e9;
  else if (unit == "tb")
    multiplier = 1e12;
  else
    return bad();
  const double value = std::strtod(number.c_str(), nullptr) * multiplier;
  if (!std::isfinite(value) || value < 0) return bad();
  if (value >= 0x1p64) {  // llround would overflow past 2^63; uint64_t ends at 2^64
    return absl::InvalidArgumentError(absl::StrCat(
        "byte size \"", std::string(text), "\" is too large: at most 2^64 - 1 bytes (16 EiB)"));
  }
  return static_cast<uint64_t>(std::round(value));
}

std::string FormatByteSizeFlag(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++u;
  }
  return absl::StrCat(bytes, kUnits[u]);
}

std::string FormatByteSize(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat("%.4g %s", v, kUnits[u]);
}

}  // namespace turbokv::server
