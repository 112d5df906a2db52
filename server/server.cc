#include "server/server.h"

#include <chrono>
#include <exception>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "server/metrics/metrics.h"
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

}  // namespace

Server::Server() = default;

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  TURBOKV_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<Server> s(new Server());
  s->options_ = options;
  TURBOKV_ASSIGN_OR_RETURN(CodecBackend backend, SelectCodecBackend(options.codec.backend));

  TURBOKV_ASSIGN_OR_RETURN(s->store_,
                           BlockStore::Open(options.storage, [](absl::Span<const uint8_t> value) {
                             return codec::VerifyPackedChecksum(value);
                           }));
  s->registry_ = std::make_unique<NamespaceRegistry>(s->store_.get(), options.codec.default_preset);
  TURBOKV_RETURN_IF_ERROR(s->registry_->Load());
  const StoreStats recovered = s->store_->Stats();
  s->recovered_namespaces_ = recovered.namespaces.size();
  s->recovered_blocks_ = recovered.blocks;

  int threads = options.codec.threads;
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  s->pool_ = std::make_unique<CodecPool>(threads);

  s->prometheus_ = std::make_shared<prometheus::Registry>();
  s->metrics_ =
      std::make_unique<Metrics>(*s->prometheus_, backend.name, options.storage.capacity_bytes);
  s->metrics_->UpdateStore(recovered, s->store_->GetDbStats());
  if (!options.metrics.listen_address.empty()) {
    try {
      s->exposer_ = std::make_unique<prometheus::Exposer>(options.metrics.listen_address);
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics on ", options.metrics.listen_address, ": ", e.what()));
    }
    s->exposer_->RegisterCollectable(s->prometheus_);
    const std::vector<int> ports = s->exposer_->GetListeningPorts();
    s->metrics_port_ = ports.empty() ? 0 : ports.front();
  }

  s->context_ = std::make_unique<ServiceContext>();
  s->context_->store = s->store_.get();
  s->context_->registry = s->registry_.get();
  s->context_->pool = s->pool_.get();
  s->context_->metrics = s->metrics_.get();
  s->context_->backend = backend;
  s->service_ = std::make_unique<TurboKvService>(s->context_.get(), TURBOKV_SERVER_VERSION);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, grpc::InsecureServerCredentials(), &s->port_);
  builder.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  // gRPC sets SO_REUSEPORT by default: a second server on the same port would then start and
  // take half the connections. One port, one store.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(s->service_.get());
  s->grpc_server_ = builder.BuildAndStart();
  if (s->grpc_server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", options.listen_address));
  }
  if (grpc::HealthCheckServiceInterface* health = s->grpc_server_->GetHealthCheckService()) {
    health->SetServingStatus(true);
    health->SetServingStatus(kServiceName, true);
  }
  s->refresh_ = std::thread([p = s.get()] { p->RefreshLoop(); });
  return s;
}

const std::string& Server::codec_backend() const { return context_->backend.name; }
const std::string& Server::codec_backend_detail() const { return context_->backend.detail; }

void Server::RefreshLoop() {
  std::unique_lock<std::mutex> l(refresh_mu_);
  while (!stop_refresh_) {
    refresh_cv_.wait_for(l, std::chrono::milliseconds(options_.metrics.refresh_interval_ms));
    if (stop_refresh_) break;
    metrics_->UpdateStore(store_->Stats(), store_->GetDbStats());
  }
}

void Server::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (context_ != nullptr) context_->shutting_down.store(true);
  if (grpc_server_ != nullptr) {
    if (grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService()) {
      health->SetServingStatus(false);
      health->SetServingStatus(kServiceName, false);
    }
    grpc_server_->Shutdown(std::chrono::system_clock::now() +
                           std::chrono::milliseconds(options_.shutdown_grace_ms));
    grpc_server_->Wait();
  }
  {
    std::lock_guard<std::mutex> l(refresh_mu_);
    stop_refresh_ = true;
  }
  refresh_cv_.notify_all();
  if (refresh_.joinable()) refresh_.join();
  pool_.reset();  // runs what is queued, then joins
  grpc_server_.reset();
  exposer_.reset();
  store_.reset();  // persists access times, flushes memtables, closes RocksDB
}

Server::~Server() { Shutdown(); }

}  // namespace turbokv::server
