#include "server/server.h"

#include <sys/statvfs.h>

#include <chrono>
#include <exception>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/cpu_count.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "server/auth/authenticator.h"
#include "server/auth/tls_credentials.h"
#include "server/events/kv_event_publisher.h"
#include "server/metrics/metrics.h"
#include "server/metrics/process_metrics.h"
#include "server/service/byte_budget.h"
#include "server/service/call_watchdog.h"
#include "server/service/codec_backend.h"
#include "server/service/codec_pool.h"
#include "server/service/namespace_registry.h"
#include "server/service/service_context.h"
#include "server/service/turbokv_service.h"
#include "server/storage/block_store.h"
#include "spdlog/spdlog.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/status_macros.h"

#ifndef TURBOKV_SERVER_VERSION
#define TURBOKV_SERVER_VERSION "0.0.0"
#endif

namespace turbokv::server {
namespace {

constexpr char kServiceName[] = "turbokv.v1.TurboKV";

// Logs what an operator would want to know about the byte budget before the first put finds
// out: a budget too small to hold blocks, one larger than the disk can give, and stored data
// above the budget (the first put will evict down to the low watermark).
void WarnAboutCapacity(const StorageOptions& options, const StoreStats& stored, const DbStats& db) {
  constexpr uint64_t kSmallCapacity = uint64_t{64} << 20;
  if (options.capacity_bytes < kSmallCapacity) {
    spdlog::warn(
        "--capacity {} is smaller than {}: most KV blocks will not fit and their puts will fail "
        "with RESOURCE_EXHAUSTED",
        FormatByteSize(options.capacity_bytes), FormatByteSize(kSmallCapacity));
  }
  struct statvfs fs {};
  if (statvfs(options.data_dir.c_str(), &fs) == 0) {
    const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    const uint64_t on_disk = db.sst_bytes + db.value_log_bytes;
    if (options.capacity_bytes > free_bytes + on_disk) {
      spdlog::warn(
          "--capacity {} is more than the {} the data dir's filesystem can hold ({} free plus "
          "{} already stored): puts will fail with RESOURCE_EXHAUSTED when the disk fills "
          "before the budget does",
          FormatByteSize(options.capacity_bytes), FormatByteSize(free_bytes + on_disk),
          FormatByteSize(free_bytes), FormatByteSize(on_disk));
    }
  }
  const auto high =
      static_cast<uint64_t>(options.high_watermark * static_cast<double>(options.capacity_bytes));
  if (stored.used_bytes > high) {
    spdlog::warn(
        "the data dir holds {} in {} blocks, above the high watermark {} of --capacity {}: the "
        "next put evicts least recently used blocks down to the low watermark",
        FormatByteSize(stored.used_bytes), stored.blocks, FormatByteSize(high),
        FormatByteSize(options.capacity_bytes));
  }
}

// What an operator must know about how the port is protected (docs/server.md, "Security").
void WarnAboutSecurity(const ServerOptions& options) {
  const AuthOptions& a = options.auth;
  if (!a.authenticates()) {
    if (a.insecure_allow_remote) {
      spdlog::warn(
          "*** INSECURE: no authentication is configured and --insecure-allow-remote is set: "
          "ANY client that reaches {} can read, overwrite and drop every namespace. Configure "
          "--token-file and --tls-cert/--tls-key (docs/server.md, Security) ***",
          options.listen_address);
    } else {
      const std::string& l = options.listen_address;
      const bool loopback_only = l.rfind("127.", 0) == 0 || l.rfind("[::1]:", 0) == 0 ||
                                 l.rfind("localhost:", 0) == 0 || l.rfind("unix:", 0) == 0;
      // Listening on loopback only, protected mode changes nothing: no warning.
      spdlog::log(loopback_only ? spdlog::level::info : spdlog::level::warn,
                  "protected mode: no authentication is configured, so only loopback clients "
                  "are answered (remote calls get PERMISSION_DENIED); configure --token-file or "
                  "--tls-client-ca, or pass --insecure-allow-remote");
    }
  } else if (!a.tls()) {
    spdlog::warn(
        "bearer tokens are accepted over plaintext gRPC on {}: anyone on the path can "
        "read them; configure --tls-cert and --tls-key",
        options.listen_address);
  }
  const std::string& m = options.metrics.listen_address;
  if (!m.empty() && m.rfind("127.", 0) != 0 && m.rfind("[::1]", 0) != 0 &&
      m.rfind("localhost:", 0) != 0) {
    spdlog::info("metrics are served without authentication on {} (plain HTTP)", m);
  }
}

}  // namespace

Server::Server() = default;

absl::Status Server::ReloadCredentials() {
  absl::Status s = auth_ != nullptr ? auth_->Reload() : absl::OkStatus();
  if (tls_ != nullptr) {
    absl::Status t = tls_->Reload();
    if (s.ok()) s = t;
  }
  return s;
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  TURBOKV_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<Server> s(new Server());
  s->options_ = options;
  s->tasks_ = std::make_unique<PeriodicTasks>("tkv-periodic");
  TURBOKV_ASSIGN_OR_RETURN(CodecBackend backend, SelectCodecBackend(options.codec.backend));

  // The metrics port is bound before the store is opened, and a data dir this call created is
  // removed when a later step fails: a start that fails leaves nothing behind.
  s->prometheus_ = std::make_shared<prometheus::Registry>();
  if (!options.metrics.listen_address.empty()) {
    try {
      s->exposer_ = std::make_unique<prometheus::Exposer>(options.metrics.listen_address);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", options.metrics.listen_address, ": ", e.what()));
    }
    const std::vector<int> ports = s->exposer_->GetListeningPorts();
    s->metrics_port_ = ports.empty() ? 0 : ports.front();
  }
  std::error_code ec;
  const bool creates_data_dir = !std::filesystem::exists(options.storage.data_dir, ec);
  if (absl::Status started = s->StartServing(backend); !started.ok()) {
    s.reset();  // closes the store
    if (creates_data_dir) std::filesystem::remove_all(options.storage.data_dir, ec);
    return started;
  }
  return s;
}

absl::Status Server::StartServing(const CodecBackend& backend) {
  const ServerOptions& options = options_;
  if (!options.kv_events.listen_address.empty()) {
    // block_size of BlockStored: the registry is built after the publisher, and is read on
    // the publisher's thread only (never under the store's locks).
    TURBOKV_ASSIGN_OR_RETURN(
        kv_events_, KvEventPublisher::Start(options.kv_events, [this](uint64_t id) -> uint32_t {
          const NamespaceRegistry* registry = events_registry_.load();
          if (registry == nullptr) return 0;
          absl::StatusOr<std::shared_ptr<const Namespace>> ns = registry->Get(id);
          return ns.ok() ? (*ns)->descriptor.block_tokens() : 0;
        }));
  }
  TURBOKV_ASSIGN_OR_RETURN(store_, BlockStore::Open(
                                       options.storage,
                                       [](absl::Span<const uint8_t> value) {
                                         return codec::VerifyPackedChecksum(value);
                                       },
                                       /*clock=*/nullptr, kv_events_.get(), tasks_.get()));
  registry_ = std::make_unique<NamespaceRegistry>(store_.get(), options.codec.default_preset,
                                                  options.limits);
  TURBOKV_RETURN_IF_ERROR(registry_->Load());
  events_registry_.store(registry_.get());
  const StoreStats recovered = store_->Stats();
  recovered_namespaces_ = recovered.namespaces.size();
  recovered_blocks_ = recovered.blocks;
  WarnAboutCapacity(options.storage, recovered, store_->GetDbStats());

  const int cpus = AvailableCpus();
  const int threads = options.codec.threads != 0 ? options.codec.threads : cpus;
  const int io_threads =
      options.codec.io_threads != 0 ? options.codec.io_threads : std::max(4, 2 * cpus);
  pool_ = std::make_unique<CodecPool>("codec", threads, options.limits.max_queued_tasks);
  io_pool_ = std::make_unique<CodecPool>("io", io_threads, options.limits.max_queued_tasks);
  // Without authentication every caller is the one tenant "": it gets the whole budget.
  budget_ = std::make_unique<ByteBudget>(
      options.limits.max_in_flight_bytes,
      options.auth.authenticates() ? options.limits.tenant_in_flight_share : 1.0);
  watchdog_ = std::make_unique<CallWatchdog>();

  metrics_ = std::make_unique<Metrics>(*prometheus_, backend.name, options.storage.capacity_bytes,
                                       backend.cpu_name);
  TURBOKV_ASSIGN_OR_RETURN(auth_, Authenticator::Create(options.auth, *prometheus_, *tasks_));
  // The store keeps each tenant within its quota as its puts commit (block_store.h,
  // "Tenants"); the quotas follow the token file as it is re-read.
  store_->SetTenantQuotas(
      [auth = auth_.get()](std::string_view tenant) { return auth->QuotaBytes(tenant); });
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (options.auth.tls()) {
    TURBOKV_ASSIGN_OR_RETURN(
        tls_, TlsCredentials::Create(options.auth, auth_.get(), *prometheus_, *tasks_));
    credentials = tls_->credentials();
  }
  WarnAboutSecurity(options);
  backend.AttachMetrics(metrics_.get());  // EncodeBlocks / DecodeBlocks record the codec metrics
  metrics_->UpdateStore(recovered, store_->GetDbStats());
  if (exposer_ != nullptr) {
    exposer_->RegisterCollectable(prometheus_);
    BuildInfo build;
    build.version = TURBOKV_SERVER_VERSION;
    build.codec_isa = codec::CpuIsaName(codec::DetectCpuIsa());
#ifdef TURBOKV_HAVE_CUDA
    build.cuda = true;
#endif
    process_metrics_ = std::make_shared<ProcessMetrics>(std::move(build));
    exposer_->RegisterCollectable(process_metrics_);
  }

  context_ = std::make_unique<ServiceContext>();
  context_->store = store_.get();
  context_->registry = registry_.get();
  context_->pool = pool_.get();
  context_->io_pool = io_pool_.get();
  context_->budget = budget_.get();
  context_->watchdog = watchdog_.get();
  context_->limits = options.limits;
  context_->metrics = metrics_.get();
  context_->auth = auth_.get();
  context_->backend = backend;
  service_ = std::make_unique<TurboKvService>(context_.get(), TURBOKV_SERVER_VERSION);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, credentials, &port_);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  // gRPC's own buffers (HTTP/2 flow-control windows of streams whose next message turbokv has
  // not asked for yet) are bounded by its memory quota: under pressure gRPC shrinks the
  // windows, so a client cannot park data in the transport past the in-flight budget either.
  grpc::ResourceQuota quota("turbokv-server");
  quota.Resize(options.limits.max_in_flight_bytes + (uint64_t{64} << 20));
  builder.SetResourceQuota(quota);
  // gRPC sets SO_REUSEPORT by default: a second server on the same port would then start and
  // take half the connections. One port, one store.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(service_.get());
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", options.listen_address));
  }
  if (!options.health_listen_address.empty()) {
    // A second gRPC server with nothing but grpc.health.v1.Health, in plaintext: kubelet's
    // gRPC probes cannot speak TLS. It reveals only SERVING / NOT_SERVING.
    grpc::ServerBuilder health_builder;
    health_builder.AddListeningPort(options.health_listen_address,
                                    grpc::InsecureServerCredentials(), &health_port_);
    health_builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    health_server_ = health_builder.BuildAndStart();
    if (health_server_ == nullptr || health_port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve health checks on ", options.health_listen_address));
    }
  }
  for (grpc::Server* server : {grpc_server_.get(), health_server_.get()}) {
    if (server == nullptr) continue;
    if (grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService()) {
      health->SetServingStatus(true);
      health->SetServingStatus(kServiceName, true);
    }
  }
  refresh_ = tasks_->Add("metrics refresh",
                         std::chrono::milliseconds(options.metrics.refresh_interval_ms), [this] {
                           RefreshMetrics();
                           return absl::OkStatus();
                         });
  return absl::OkStatus();
}

std::string Server::kv_events_endpoint() const {
  return kv_events_ != nullptr ? kv_events_->endpoint() : std::string();
}
int Server::kv_events_port() const { return kv_events_ != nullptr ? kv_events_->port() : 0; }
const std::string& Server::codec_backend() const { return context_->backend.name; }
int Server::codec_threads() const { return pool_->threads(); }
int Server::io_threads() const { return io_pool_->threads(); }
const std::string& Server::codec_backend_detail() const { return context_->backend.detail; }

void Server::RefreshMetrics() {
  metrics_->UpdateStore(store_->Stats(), store_->GetDbStats());
  metrics_->UpdateAdmission(budget_->in_use(), budget_->rejected());
  if (kv_events_ != nullptr) {
    const KvEventPublisher::Stats ev = kv_events_->stats();
    metrics_->UpdateKvEvents(ev.published_events, ev.dropped_events);
  }
}

void Server::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (context_ != nullptr) context_->shutting_down.store(true);
  if (health_server_ != nullptr) {
    if (grpc::HealthCheckServiceInterface* health = health_server_->GetHealthCheckService()) {
      health->SetServingStatus(false);
      health->SetServingStatus(kServiceName, false);
    }
  }
  if (grpc_server_ != nullptr) {
    if (grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService()) {
      health->SetServingStatus(false);
      health->SetServingStatus(kServiceName, false);
    }
    grpc_server_->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(options_.shutdown_grace_ms));
    grpc_server_->Wait();
  }
  // No periodic task runs from here on (token file, certificates, store maintenance, metrics):
  // the objects they touch are destroyed below. Their Handles' Cancel() then does nothing.
  if (tasks_ != nullptr) tasks_->Shutdown();
  if (budget_ != nullptr) budget_->Shutdown();
  io_pool_.reset();  // runs what is queued (I/O tasks may queue codec work), then joins
  pool_.reset();
  grpc_server_.reset();
  if (health_server_ != nullptr) {
    health_server_->Shutdown(std::chrono::system_clock::now());
    health_server_.reset();
  }
  tls_.reset();
  exposer_.reset();
  if (store_ != nullptr) store_->SetTenantQuotas(nullptr);  // before the quotas' source goes
  auth_.reset();
  watchdog_.reset();  // every call is done: nothing is armed
  budget_.reset();
  store_.reset();      // persists access times, flushes memtables, closes RocksDB
  kv_events_.reset();  // sends what the store reported last, then closes the socket
}

Server::~Server() { Shutdown(); }

}  // namespace turbokv::server
