#include "server/auth/tls_credentials.h"

#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace turbokv::server {
namespace {

struct BioCloser {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioCloser>;

absl::StatusOr<BioPtr> Open(const std::string& flag, const std::string& path) {
  BioPtr bio(BIO_new_file(path.c_str(), "r"));
  if (bio == nullptr) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  return bio;
}

// Reads the certificate and key and checks that they belong together.
absl::Status CheckIdentity(const AuthOptions& o) {
  auto cert_bio = Open("--tls-cert", o.tls_cert);
  if (!cert_bio.ok()) return cert_bio.status();
  X509* cert = PEM_read_bio_X509(cert_bio->get(), nullptr, nullptr, nullptr);
  if (cert == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert: ", o.tls_cert, " holds no PEM certificate"));
  }
  auto key_bio = Open("--tls-key", o.tls_key);
  if (!key_bio.ok()) {
    X509_free(cert);
    return key_bio.status();
  }
  EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio->get(), nullptr, nullptr, nullptr);
  absl::Status s;
  if (key == nullptr) {
    s = absl::InvalidArgumentError(
        absl::StrCat("--tls-key: ", o.tls_key, " holds no unencrypted PEM private key"));
  } else if (X509_check_private_key(cert, key) != 1) {
    s = absl::InvalidArgumentError(absl::StrCat("--tls-key: ", o.tls_key,
                                                " is not the key of the certificate in ",
                                                o.tls_cert));
  }
  EVP_PKEY_free(key);
  X509_free(cert);
  return s;
}

absl::Status CheckClientCa(const AuthOptions& o) {
  auto bio = Open("--tls-client-ca", o.tls_client_ca);
  if (!bio.ok()) return bio.status();
  X509* ca = PEM_read_bio_X509(bio->get(), nullptr, nullptr, nullptr);
  if (ca == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-client-ca: ", o.tls_client_ca, " holds no PEM certificate"));
  }
  X509_free(ca);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> BuildServerCredentials(
    const AuthOptions& options) {
  if (!options.tls()) return grpc::InsecureServerCredentials();
  if (absl::Status s = CheckIdentity(options); !s.ok()) return s;
  const bool mtls = !options.tls_client_ca.empty();
  if (mtls) {
    if (absl::Status s = CheckClientCa(options); !s.ok()) return s;
  }
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.tls_key, options.tls_cert, mtls ? options.tls_client_ca : std::string(),
      static_cast<unsigned int>(options.cert_refresh_seconds));
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (mtls) {
    tls.watch_root_certs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(tls);
}

absl::Status AuthOptions::Validate() const {
  if (tls_cert.empty() != tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together (both or neither)");
  }
  if (!tls_client_ca.empty() && tls_cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key");
  }
  if (cert_refresh_seconds < 1) {
    return absl::InvalidArgumentError("auth.cert_refresh_seconds must be >= 1");
  }
  if (token_reload_ms < 50) {
    return absl::InvalidArgumentError("auth.token_reload_ms must be >= 50");
  }
  return absl::OkStatus();
}

}  // namespace turbokv::server
