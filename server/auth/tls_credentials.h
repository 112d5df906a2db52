// gRPC server credentials of the TurboKV port from AuthOptions: plaintext, TLS, or mutual TLS
// (client certificates required and verified against tls_client_ca). The files are watched by
// gRPC's FileWatcherCertificateProvider (re-read every cert_refresh_seconds; new connections
// use the new certificate, established ones keep theirs).
#ifndef TURBOKV_SERVER_AUTH_TLS_CREDENTIALS_H_
#define TURBOKV_SERVER_AUTH_TLS_CREDENTIALS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"
#include "server/auth/auth_options.h"

namespace turbokv::server {

// Checks the files first with OpenSSL, so that a start with an unreadable or mismatched
// certificate fails here instead of at every handshake: InvalidArgument naming the file
// (not PEM, key does not match the certificate, no certificate in the client CA bundle).
[[nodiscard]] absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> BuildServerCredentials(
    const AuthOptions& options);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_AUTH_TLS_CREDENTIALS_H_
