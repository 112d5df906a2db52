// Authenticates every TurboKV call: who is calling (a Principal: tenant and role) or why not.
//
// Without authentication (no token file, no client CA) every caller is the admin of tenant "",
// and only loopback peers are answered unless insecure_allow_remote ("protected mode").
// With a token file, a call carries `authorization: Bearer <token>` metadata, or comes over a
// mutual-TLS connection whose client certificate the file names (`cert` entries); the token
// wins when both are there. With a client CA and no token file, every client holding a
// certificate from that CA (the handshake already checked it) is the admin of tenant "".
//
// A refused call gets UNAUTHENTICATED (no or bad credentials) or PERMISSION_DENIED (protected
// mode), is counted in turbokv_auth_failures_total{reason} and logged as one audit line
// ("audit: refused <method> from <peer>: <reason>"; at most 20 lines a second, the rest
// counted in the next line). Neither the token nor anything else the client sent is logged or
// used as a label.
//
// The token file is re-read on Reload() (SIGHUP) and when its modification time, size or
// inode changes (polled every token_reload_ms by a task on the server's PeriodicTasks; a
// Kubernetes Secret update swaps a symlink, so this sees it). A file that no longer parses keeps
// the previous table (logged, counted in turbokv_auth_token_file_reloads_total{result="error"}).
//
// Thread safety: all methods are thread-safe.
#ifndef TURBOKV_SERVER_AUTH_AUTHENTICATOR_H_
#define TURBOKV_SERVER_AUTH_AUTHENTICATOR_H_

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/periodic_tasks.h"
#include "grpcpp/server_context.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "server/auth/auth_options.h"
#include "server/auth/principal.h"
#include "server/auth/token_table.h"

namespace turbokv::server {

// Why a call was refused: the `reason` label of turbokv_auth_failures_total.
enum class AuthFailure {
  kMissingCredentials,  // no bearer token, no certificate the token file names
  kInvalidToken,        // a bearer token that is not in the token file (or malformed)
  kUnknownCertificate,  // a verified client certificate the token file does not name
  kNotLoopback,         // protected mode: a remote peer, no authentication configured
  // Refused TLS handshakes (mutual TLS, server/auth/tls_credentials.h):
  kTlsNoClientCert,  // the client presented no certificate
  kTlsClientCert,    // its certificate does not verify against --tls-client-ca
};
inline constexpr int kNumAuthFailures = 6;
const char* AuthFailureName(AuthFailure reason);  // "missing_credentials", ...

// True for loopback peers in gRPC's peer() spelling: "ipv4:127.x.x.x:port",
// "ipv6:[::1]:port" (also URI-escaped, also ::ffff:127.x.x.x) and "unix:...".
bool IsLoopbackPeer(std::string_view peer);

class Authenticator {
 public:
  // Reads the token file (when configured). InvalidArgument: the file does not parse.
  // NotFound: it cannot be read. Families are registered in `registry`. With a token file, the
  // file is checked every token_reload_ms by a task on `tasks`, which must outlive the
  // Authenticator (the task is removed when it is destroyed).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Authenticator>> Create(
      const AuthOptions& options, prometheus::Registry& registry, PeriodicTasks& tasks);
  ~Authenticator();  // removes the file check, waiting for a run in progress
  Authenticator(const Authenticator&) = delete;
  Authenticator& operator=(const Authenticator&) = delete;

  // The caller of `context`, or the refusal (counted, audit-logged). `method`: "Lookup", ...
  [[nodiscard]] absl::StatusOr<Principal> Authenticate(const grpc::ServerContextBase& context,
                                                       std::string_view method);

  // A TLS handshake refused for `reason` (kTlsNoClientCert, kTlsClientCert): counted and
  // audit-logged like a refused call ("audit: refused TLS handshake: <reason> (<detail>)").
  // `detail` must be the server's own words (OpenSSL's reason, a fingerprint), never text
  // the client sent.
  void RecordHandshakeFailure(AuthFailure reason, std::string_view detail);

  // Re-reads the token file now (no-op without one). On error the previous table stays.
  [[nodiscard]] absl::Status Reload();

  // The byte quota of `tenant` (its quota entry, else default_tenant_quota_bytes); 0: none.
  uint64_t QuotaBytes(std::string_view tenant) const;

  const AuthOptions& options() const { return options_; }

 private:
  Authenticator(const AuthOptions& options, prometheus::Registry& registry);
  absl::Status Refuse(AuthFailure reason, absl::Status status, const grpc::ServerContextBase& ctx,
                      std::string_view method);
  // Counts `reason`; logs `what` + reason + `detail` unless over the audit-line rate.
  void Audit(AuthFailure reason, const std::string& what, std::string_view detail);
  // The periodic task: Reload() when the file's stamp changed. Returns Reload()'s error.
  absl::Status CheckFile();

  const AuthOptions options_;
  // Children appear with their first event (an idle server exports no zeros);
  // Family::Add is thread-safe and returns the existing child.
  prometheus::Family<prometheus::Counter>& failures_family_;
  prometheus::Family<prometheus::Counter>& reloads_family_;

  mutable std::mutex mu_;  // guards table_ and file_stamp_
  std::shared_ptr<const TokenTable> table_;
  std::string file_stamp_;  // mtime, size and inode of the file table_ came from

  std::mutex audit_mu_;  // guards the audit-line rate limit
  int64_t audit_second_ = 0;
  int audit_lines_ = 0;
  uint64_t audit_suppressed_ = 0;

  PeriodicTasks::Handle watch_;  // the file check; empty without a token file
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_AUTH_AUTHENTICATOR_H_
