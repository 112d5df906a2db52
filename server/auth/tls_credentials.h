// gRPC server credentials of the TurboKV port from AuthOptions: TLS, or mutual TLS (client
// certificates required and verified against tls_client_ca), with the files re-read on
// Reload() (SIGHUP) and when they change on disk (checked every cert_refresh_seconds by a task on
// the server's PeriodicTasks).
//
// How a reload reaches gRPC: gRPC 1.51's public API has no certificate provider that can be
// pushed new certificates (StaticDataCertificateProvider never changes,
// FileWatcherCertificateProvider only polls). So the checked contents of the three files are
// kept in memory files (memfd_create, never on disk: no second copy of the private key) that a
// FileWatcherCertificateProvider polls every second through /proc/self/fd/N; a reload swaps
// each memory file atomically (dup3 onto the same descriptor). New handshakes use the new
// certificates within a second; established connections keep theirs. A reload whose files do
// not check out (unreadable, not PEM, key not matching the certificate, a half-replaced pair)
// keeps the previous certificates: logged, counted in
// turbokv_auth_cert_reloads_total{result="error"}, retried when the files change again.
//
// Client certificates (mutual TLS) are verified here, not inside OpenSSL's handshake, so that
// a refused one is visible: gRPC asks the client for a certificate without verifying it
// (GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_BUT_DONT_VERIFY) and hands the presented chain to an
// ExternalCertificateVerifier, which checks it with OpenSSL (X509_verify_cert, purpose SSL
// client, against the current client CA bundle) and refuses the handshake when there is no
// certificate or it does not verify. Each refusal is counted in
// turbokv_auth_failures_total{reason="tls_no_client_cert"|"tls_client_cert"} and logged as an
// audit line with OpenSSL's reason and the SHA-256 fingerprint of the presented certificate
// (never its text). gRPC's verifier API does not expose the peer address, and handshakes that
// fail before a certificate is presented (plaintext on the TLS port, no common protocol or
// cipher, a client that rejects the server's certificate) never reach it: docs/server.md,
// "Security".
//
// Thread safety: all methods are thread-safe.
#ifndef TURBOKV_SERVER_AUTH_TLS_CREDENTIALS_H_
#define TURBOKV_SERVER_AUTH_TLS_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/periodic_tasks.h"
#include "grpcpp/security/server_credentials.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "server/auth/auth_options.h"

namespace turbokv::server {

class Authenticator;

class TlsCredentials {
 public:
  // Reads and checks the files (options.tls() must hold): InvalidArgument naming the file
  // (unreadable, not PEM, key does not match the certificate, no certificate in the client
  // CA bundle); Internal when a memory file cannot be made. `auth` counts and logs refused
  // client certificates and must outlive the gRPC server using credentials(). The files are
  // checked every cert_refresh_seconds by a task on `tasks`, which must outlive this object.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<TlsCredentials>> Create(
      const AuthOptions& options, Authenticator* auth, prometheus::Registry& registry,
      PeriodicTasks& tasks);
  ~TlsCredentials();  // removes the file check, waiting for a run in progress
  TlsCredentials(const TlsCredentials&) = delete;
  TlsCredentials& operator=(const TlsCredentials&) = delete;

  std::shared_ptr<grpc::ServerCredentials> credentials() const { return credentials_; }

  // Re-reads the files now. On error the previous certificates stay and the error is returned.
  [[nodiscard]] absl::Status Reload();

  struct State;  // shared with the verifier gRPC owns

 private:
  TlsCredentials(const AuthOptions& options, prometheus::Registry& registry);
  // The periodic task: Reload() when a file's stamp changed. Returns Reload()'s error.
  absl::Status CheckFiles();

  const AuthOptions options_;
  prometheus::Family<prometheus::Counter>& reloads_family_;
  std::shared_ptr<State> state_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;

  PeriodicTasks::Handle watch_;  // the file check
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_AUTH_TLS_CREDENTIALS_H_
