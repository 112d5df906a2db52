// turbokv-server assembled: block store, namespace registry, codec worker pool, metrics
// endpoint, and the gRPC server (TurboKV service, grpc.health.v1.Health, server reflection).
//
// Thread safety: Start and Shutdown are called from one thread (main or a test).
#ifndef TURBOKV_SERVER_SERVER_H_
#define TURBOKV_SERVER_SERVER_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/periodic_tasks.h"
#include "server/server_options.h"

namespace grpc {
class Server;
}
namespace prometheus {
class Exposer;
class Registry;
}  // namespace prometheus

namespace turbokv::server {

class Authenticator;
class TlsCredentials;
class BlockStore;
class ByteBudget;
class CallWatchdog;
class CodecPool;
struct CodecBackend;
class KvEventPublisher;
class Metrics;
class NamespaceRegistry;
class ProcessMetrics;
class TurboKvService;
struct ServiceContext;

class Server {
 public:
  // Validates the options, opens the store (recovering namespaces and accounting), binds the
  // metrics endpoint and the gRPC port, and starts serving (health: SERVING).
  // InvalidArgument: options. FailedPrecondition: codec backend unavailable. Unavailable:
  // a port cannot be bound or the data directory cannot be opened.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);
  ~Server();  // Shutdown() if not done yet.
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Health NOT_SERVING, new calls UNAVAILABLE, in-flight calls get shutdown_grace_ms to finish
  // (then are cancelled), then the pool drains and the store is flushed and closed. Idempotent.
  void Shutdown();

  // Re-reads the token file and the TLS certificate files now (SIGHUP). On error the previous
  // tokens (or certificates) stay and the first error is returned.
  [[nodiscard]] absl::Status ReloadCredentials();

  int port() const { return port_; }
  int codec_threads() const;                          // resolved worker counts
  int io_threads() const;                             // bound gRPC port
  int metrics_port() const { return metrics_port_; }  // 0 when metrics are disabled
  int health_port() const { return health_port_; }    // 0 without --health-listen
  // The bound KV-event endpoint ("tcp://127.0.0.1:40123"); "" without --kv-events-listen.
  std::string kv_events_endpoint() const;
  int kv_events_port() const;                       // 0 without --kv-events-listen
  const std::string& codec_backend() const;         // "cpu-avx2", "cuda", ...
  const std::string& codec_backend_detail() const;  // GPU name, or why not CUDA
  uint64_t recovered_namespaces() const { return recovered_namespaces_; }
  uint64_t recovered_blocks() const { return recovered_blocks_; }

 private:
  Server();
  // Opens the store and the registry, builds the service and binds the gRPC port.
  absl::Status StartServing(const CodecBackend& backend);
  // The metrics refresh task (every metrics.refresh_interval_ms).
  void RefreshMetrics();

  ServerOptions options_;
  // The one thread of the periodic background work (token file, certificates, store
  // maintenance, metrics refresh): declared first so it outlives every component holding a
  // task; Shutdown() stops it once the gRPC server has drained, before anything is destroyed.
  std::unique_ptr<PeriodicTasks> tasks_;
  // Declared before the store: the store reports to it, so it is destroyed after the store.
  std::unique_ptr<KvEventPublisher> kv_events_;  // null without kv_events.listen_address
  std::unique_ptr<BlockStore> store_;
  std::unique_ptr<NamespaceRegistry> registry_;
  // registry_ for the KV-event publisher's thread (set once it is loaded).
  std::atomic<const NamespaceRegistry*> events_registry_{nullptr};
  std::unique_ptr<CodecPool> pool_;
  std::unique_ptr<CodecPool> io_pool_;
  std::unique_ptr<ByteBudget> budget_;
  std::unique_ptr<CallWatchdog> watchdog_;
  std::shared_ptr<prometheus::Registry> prometheus_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Authenticator> auth_;
  std::unique_ptr<TlsCredentials> tls_;  // null for a plaintext port
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<ProcessMetrics> process_metrics_;
  std::unique_ptr<ServiceContext> context_;
  std::unique_ptr<TurboKvService> service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<grpc::Server> health_server_;  // --health-listen, when set
  int port_ = 0;
  int health_port_ = 0;
  int metrics_port_ = 0;
  uint64_t recovered_namespaces_ = 0;
  uint64_t recovered_blocks_ = 0;

  PeriodicTasks::Handle refresh_;  // RefreshMetrics
  bool shut_down_ = false;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVER_H_
