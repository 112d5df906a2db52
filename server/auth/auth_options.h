// Transport security and authentication options of turbokv-server (docs/server.md,
// "Security"). Part of ServerOptions; main.cc fills it from flags, tests build it directly.
// Defaults are the initializers below; flags, ranges and help are in AuthOptionTable().
#ifndef TURBOKV_SERVER_AUTH_AUTH_OPTIONS_H_
#define TURBOKV_SERVER_AUTH_AUTH_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "common/option_table.h"

namespace turbokv::server {

struct AuthOptions {
  // PEM server certificate chain and private key of the gRPC port. Both or neither; when set
  // the port speaks TLS only. Re-read (with the client CA) on SIGHUP and when they change on
  // disk (server/auth/tls_credentials.h), so a renewed certificate (cert-manager) is picked up
  // without a restart. Default: "" (plaintext).
  std::string tls_cert;
  std::string tls_key;
  // PEM bundle of the CAs whose client certificates are accepted. Set: mutual TLS, a client
  // without a certificate signed by one of them is refused during the handshake. Needs
  // tls_cert. Default: "" (no client certificates requested).
  std::string tls_client_ca;
  // How often the certificate files are checked for changes, seconds. Default: 60.
  int cert_refresh_seconds = 60;
  // The token file (format: docs/server.md, "Tokens and tenants"): SHA-256 digests of bearer
  // tokens, client-certificate identities, their tenants and roles, per-tenant quotas.
  // Re-read on SIGHUP and when it changes on disk. Default: "" (no tokens).
  std::string token_file;
  // How often the token file is checked for changes, milliseconds. Default: 2000.
  int token_reload_ms = 2000;
  // With no authentication configured (no token file and no client CA) the server only
  // answers loopback clients ("protected mode"). True: it answers everyone, and says so
  // loudly at start-up. Default: false.
  bool insecure_allow_remote = false;
  // Byte quota of a tenant the token file gives none: 0 = only the global capacity.
  // Default: 0.
  uint64_t default_tenant_quota_bytes = 0;

  // True when callers are authenticated (token file or client CA).
  bool authenticates() const { return !token_file.empty() || !tls_client_ca.empty(); }
  bool tls() const { return !tls_cert.empty(); }

  // InvalidArgument: cert without key (or the reverse), client CA without a server
  // certificate, intervals out of range (AuthOptionTable()).
  [[nodiscard]] absl::Status Validate() const;
};

// Flag, field name, range, unit and help of every AuthOptions field (auth_options.cc).
const OptionTable<AuthOptions>& AuthOptionTable();

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_AUTH_AUTH_OPTIONS_H_
