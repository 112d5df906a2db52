#include "server/auth/auth_options.h"

#include <limits>

namespace turbokv::server {

const OptionTable<AuthOptions>& AuthOptionTable() {
  using O = AuthOptions;
  static const auto* table = [] {
    auto* t = new OptionTable<O>;
    t->File("--tls-cert", "auth.tls_cert", &O::tls_cert,
            "PEM certificate chain of the gRPC port; with --tls-key the port speaks TLS only");
    t->File("--tls-key", "auth.tls_key", &O::tls_key, "PEM private key of --tls-cert");
    t->File("--tls-client-ca", "auth.tls_client_ca", &O::tls_client_ca,
            "PEM bundle of the CAs whose client certificates are accepted: mutual TLS, clients "
            "without such a certificate are refused");
    t->Number("--cert-refresh-seconds", "auth.cert_refresh_seconds", &O::cert_refresh_seconds, 1,
              86400, OptionUnit::kSeconds,
              "How often the certificate files are checked for changes (renewed certificates "
              "need no restart); SIGHUP re-reads them at once");
    t->File("--token-file", "auth.token_file", &O::token_file,
            "Bearer tokens (as SHA-256), client-certificate identities, their tenants, roles and "
            "quotas (docs/server.md, Security); re-read on SIGHUP and when it changes");
    t->Number("--token-reload-ms", "auth.token_reload_ms", &O::token_reload_ms, 50, 3600000,
              OptionUnit::kMilliseconds, "How often the token file is checked for changes");
    t->Switch("--insecure-allow-remote", "auth.insecure_allow_remote", &O::insecure_allow_remote,
              "Without --token-file or --tls-client-ca, answer remote clients too (default: "
              "loopback only, \"protected mode\"); every client can then read and drop every "
              "namespace");
    t->Bytes("--default-tenant-quota", "auth.default_tenant_quota_bytes",
             &O::default_tenant_quota_bytes, 0, std::numeric_limits<uint64_t>::max(),
             "Packed bytes a tenant may store when the token file gives it no quota; 0 = only "
             "--capacity");
    return t;
  }();
  return *table;
}

absl::Status AuthOptions::Validate() const {
  if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together (both or neither)");
  }
  if (!tls_client_ca.empty() && tls_cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key");
  }
  return AuthOptionTable().Validate(*this);
}

}  // namespace turbokv::server
