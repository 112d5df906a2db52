#include "server/server_options.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "turbokv/codec/status_macros.h"
#include "turbokv/codec/types.h"

namespace turbokv::server {
namespace {

// The backend names, in --help order: the flag, ParseCodecBackendKind and CodecBackendKindName
// use it.
const std::vector<std::pair<std::string, CodecBackendKind>>& CodecBackendNames() {
  static const auto* names =
      new std::vector<std::pair<std::string, CodecBackendKind>>{{"auto", CodecBackendKind::kAuto},
                                                                {"cpu", CodecBackendKind::kCpu},
                                                                {"cuda", CodecBackendKind::kCuda}};
  return *names;
}

constexpr uint32_t kNoMax32 = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kNoMax64 = std::numeric_limits<uint64_t>::max();
constexpr int kNoMaxInt = std::numeric_limits<int>::max();

const OptionTable<CodecOptions>& CodecOptionTable() {
  using O = CodecOptions;
  static const auto* table = [] {
    auto* t = new OptionTable<O>;
    t->Enum("--codec-backend", "codec.backend", &O::backend, CodecBackendNames(),
            "auto: CUDA when available, else CPU; cpu; cuda (startup fails when the CUDA "
            "backend is not available)");
    t->Number("--codec-threads", "codec.threads", &O::threads, 0, 1024, OptionUnit::kNone,
              "Codec worker threads (encode, decode, verify); 0 = the CPUs this process may "
              "use (CPU affinity, capped by the cgroup CPU quota)");
    t->Number("--io-threads", "codec.io_threads", &O::io_threads, 0, 1024, OptionUnit::kNone,
              "Storage I/O threads (RocksDB reads and writes, apart from the codec threads); "
              "0 = max(4, 2 x CPUs)");
    return t;
  }();
  return *table;
}

// --default-preset is listed after the limits (its place in --help); its choices come from the
// codec library.
const OptionTable<CodecOptions>& CodecPresetOptionTable() {
  using O = CodecOptions;
  static const auto* table = [] {
    auto* t = new OptionTable<O>;
    const auto& presets = codec::PresetNames();
    t->Text("--default-preset", "codec.default_preset", &O::default_preset, "",
            std::vector<std::string>(presets.begin(), presets.end()),
            "Codec preset of namespaces registered without one");
    return t;
  }();
  return *table;
}

const OptionTable<MetricsOptions>& MetricsOptionTable() {
  using O = MetricsOptions;
  static const auto* table = [] {
    auto* t = new OptionTable<O>;
    t->Text("--metrics-listen", "metrics.listen_address", &O::listen_address, "HOST:PORT", {},
            "Prometheus /metrics address HOST:PORT; port 0 picks a free port; \"\" disables");
    t->Number("", "metrics.refresh_interval_ms", &O::refresh_interval_ms, 10, kNoMaxInt,
              OptionUnit::kMilliseconds, "Period of the storage gauge refresh");
    return t;
  }();
  return *table;
}

const OptionTable<LimitOptions>& LimitOptionTable() {
  using O = LimitOptions;
  static const auto* table = [] {
    auto* t = new OptionTable<O>;
    t->Bytes("--max-block-bytes", "limits.max_block_bytes", &O::max_block_bytes, 4096,
             uint64_t{1} << 30,
             "Largest raw or packed block a namespace may have (checked at RegisterNamespace)");
    t->Bytes("--max-codec-setup-bytes", "limits.max_codec_setup_bytes", &O::max_codec_setup_bytes,
             uint64_t{1} << 20, kNoMax64,
             "Most memory one namespace's codec tables may take (QJL matrices, sign masks)");
    t->Number<uint32_t>("--max-namespaces", "limits.max_namespaces", &O::max_namespaces, 1,
                        kNoMax32, OptionUnit::kNone, "Most namespaces the server holds");
    t->Number<uint32_t>("--max-namespaces-per-tenant", "limits.max_namespaces_per_tenant",
                        &O::max_namespaces_per_tenant, 1, kNoMax32, OptionUnit::kNone,
                        "Most namespaces one tenant holds (so that no tenant fills "
                        "--max-namespaces)");
    t->Number<uint32_t>("--max-descriptor-string-bytes", "limits.max_descriptor_string_bytes",
                        &O::max_descriptor_string_bytes, 1, kNoMax32, OptionUnit::kNone,
                        "Longest model, model_revision and cache_salt of a namespace "
                        "descriptor, bytes");
    t->Number<uint32_t>("--max-lease-seconds", "limits.max_lease_seconds", &O::max_lease_seconds, 1,
                        kNoMax32, OptionUnit::kSeconds, "Longest Lookup lease");
    t->Number<uint32_t>("--max-hashes-per-call", "limits.max_hashes_per_call",
                        &O::max_hashes_per_call, 1, kNoMax32, OptionUnit::kNone,
                        "Most block hashes in one Lookup, GetBlocks or DeleteBlocks");
    t->Bytes("--max-in-flight-bytes", "limits.max_in_flight_bytes", &O::max_in_flight_bytes,
             uint64_t{4} << 20, kNoMax64,
             "Server-wide budget of request bytes in flight (put chunks not yet stored, get "
             "responses not yet sent); calls wait for it, then get RESOURCE_EXHAUSTED");
    t->Number("--admission-timeout-ms", "limits.admission_timeout_ms", &O::admission_timeout_ms, 0,
              kNoMaxInt, OptionUnit::kMilliseconds,
              "How long a call waits for in-flight budget before RESOURCE_EXHAUSTED");
    t->Number("--tenant-in-flight-share", "limits.tenant_in_flight_share",
              &O::tenant_in_flight_share, 0.001, 1.0, OptionUnit::kFraction,
              "The most of --max-in-flight-bytes one tenant's calls may hold; the rest stays for "
              "the other tenants (with --token-file or --tls-client-ca; without, the one tenant "
              "has it all)");
    t->Number("--stream-idle-timeout-ms", "limits.stream_idle_timeout_ms",
              &O::stream_idle_timeout_ms, 0, kNoMaxInt, OptionUnit::kMilliseconds,
              "A PutBlocks stream whose client sends nothing for this long is cancelled and its "
              "in-flight budget given back; 0 = never");
    t->Number("--default-deadline-ms", "limits.default_deadline_ms", &O::default_deadline_ms, 0,
              kNoMaxInt, OptionUnit::kMilliseconds,
              "Deadline of calls whose client sets none (they are cancelled then); 0 = none");
    t->Number<uint32_t>("--max-queued-tasks", "limits.max_queued_tasks", &O::max_queued_tasks, 1,
                        kNoMax32, OptionUnit::kNone,
                        "Tasks that may wait in each worker pool's queue (more: "
                        "RESOURCE_EXHAUSTED)");
    t->Number<uint32_t>("--max-stats-namespaces", "limits.max_stats_namespaces",
                        &O::max_stats_namespaces, 1, kNoMax32, OptionUnit::kNone,
                        "Namespaces per Stats response (more are paged)");
    return t;
  }();
  return *table;
}

}  // namespace

absl::StatusOr<CodecBackendKind> ParseCodecBackendKind(std::string_view name) {
  for (const auto& [text, kind] : CodecBackendNames()) {
    if (text == name) return kind;
  }
  std::vector<std::string> names;
  for (const auto& [text, kind] : CodecBackendNames()) names.push_back(text);
  return absl::InvalidArgumentError(absl::StrCat("codec backend \"", std::string(name),
                                                 "\" is not one of ", absl::StrJoin(names, ", ")));
}

std::string_view CodecBackendKindName(CodecBackendKind kind) {
  for (const auto& [text, value] : CodecBackendNames()) {
    if (value == kind) return text;
  }
  return "auto";
}

absl::Status CodecOptions::Validate() const {
  TURBOKV_RETURN_IF_ERROR(CodecOptionTable().Validate(*this));
  return CodecPresetOptionTable().Validate(*this);
}

absl::Status LimitOptions::Validate() const { return LimitOptionTable().Validate(*this); }

const OptionTable<ServerOptions>& ServerOptionTable() {
  using O = ServerOptions;
  static const auto* table = [] {
    auto* t = new OptionTable<O>;
    t->Text("--listen", "listen_address", &O::listen_address, "HOST:PORT", {},
            "gRPC address HOST:PORT; port 0 picks a free port (see --port-file)");
    t->Text("--health-listen", "health_listen_address", &O::health_listen_address, "HOST:PORT", {},
            "Plaintext HOST:PORT serving only grpc.health.v1.Health (kubelet's gRPC probes "
            "cannot speak TLS); \"\" = health on --listen only");
    t->Include(&O::metrics, MetricsOptionTable());
    t->Include(&O::kv_events, KvEventOptionTable());
    t->Include(&O::storage, StorageOptionTable());
    t->Include(&O::codec, CodecOptionTable());
    t->Include(&O::limits, LimitOptionTable());
    t->Include(&O::codec, CodecPresetOptionTable());
    t->Number("--shutdown-grace-ms", "shutdown_grace_ms", &O::shutdown_grace_ms, 0, kNoMaxInt,
              OptionUnit::kMilliseconds,
              "On SIGTERM/SIGINT, in-flight calls get this long before they are cancelled");
    // The API keeps every message below 4 MiB: chunks of at most 1 MiB plus a header.
    t->Number("", "max_receive_message_bytes", &O::max_receive_message_bytes, (1 << 20) + 4096,
              kNoMaxInt, OptionUnit::kNone,
              "Largest gRPC message accepted, bytes (room for a 1 MiB chunk and its header)");
    t->Include(&O::auth, AuthOptionTable());
    return t;
  }();
  return *table;
}

absl::Status ValidateListenAddress(std::string_view flag, std::string_view address) {
  if (address.substr(0, 5) == "unix:") return absl::OkStatus();
  const size_t colon = address.rfind(':');
  const std::string_view host =
      colon == std::string_view::npos ? address : address.substr(0, colon);
  const std::string_view port =
      colon == std::string_view::npos ? std::string_view() : address.substr(colon + 1);
  const bool bracketed = host.size() >= 2 && host.front() == '[' && host.back() == ']';
  const bool port_ok =
      !port.empty() && port.size() <= 5 &&
      std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
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
    TURBOKV_RETURN_IF_ERROR(ValidateListenAddress("health_listen_address", health_listen_address));
  }
  if (!metrics.listen_address.empty()) {
    TURBOKV_RETURN_IF_ERROR(
        ValidateListenAddress("metrics.listen_address", metrics.listen_address));
  }
  // Ranges of every field, then what relates fields to each other (the nested Validate()s,
  // which repeat their own tables' checks: a few comparisons, once at start-up).
  TURBOKV_RETURN_IF_ERROR(ServerOptionTable().Validate(*this));
  TURBOKV_RETURN_IF_ERROR(kv_events.Validate());
  TURBOKV_RETURN_IF_ERROR(storage.Validate());
  return auth.Validate();
}

}  // namespace turbokv::server
