#include "server/auth/tls_credentials.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string_view>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_certificate_verifier.h"
#include "grpcpp/security/tls_credentials_options.h"
#include "server/auth/authenticator.h"
#include "spdlog/spdlog.h"

namespace turbokv::server {
namespace {

// How often gRPC's file watcher polls the memory files: a reload is served within this long.
constexpr unsigned int kProviderPollSeconds = 1;

struct BioCloser {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioCloser>;
struct X509Closer {
  void operator()(X509* x) const { X509_free(x); }
};
using X509Ptr = std::unique_ptr<X509, X509Closer>;
struct StoreCloser {
  void operator()(X509_STORE* s) const { X509_STORE_free(s); }
};
using StorePtr = std::unique_ptr<X509_STORE, StoreCloser>;
struct KeyCloser {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using KeyPtr = std::unique_ptr<EVP_PKEY, KeyCloser>;
struct StoreCtxCloser {
  void operator()(X509_STORE_CTX* c) const { X509_STORE_CTX_free(c); }
};
struct StackCloser {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};

BioPtr MemBio(std::string_view pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

absl::StatusOr<std::string> ReadPem(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// "mtime-ns size inode" of each file, or "" for one that cannot be stat'ed.
std::string FileStamps(const AuthOptions& o) {
  std::string out;
  for (const std::string* path : {&o.tls_cert, &o.tls_key, &o.tls_client_ca}) {
    struct stat st {};
    if (!path->empty() && stat(path->c_str(), &st) == 0) {
      absl::StrAppend(&out, st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, " ", st.st_size, " ",
                      st.st_ino);
    }
    out += ";";
  }
  return out;
}

// The checked contents of the three files.
struct Loaded {
  std::string cert_pem, key_pem, ca_pem;
  StorePtr client_ca;  // null without mutual TLS
};

absl::StatusOr<Loaded> Load(const AuthOptions& o) {
  Loaded l;
  absl::StatusOr<std::string> cert = ReadPem("--tls-cert", o.tls_cert);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem("--tls-key", o.tls_key);
  if (!key.ok()) return key.status();
  l.cert_pem = *std::move(cert);
  l.key_pem = *std::move(key);
  BioPtr cert_bio = MemBio(l.cert_pem);
  X509Ptr x(PEM_read_bio_X509(cert_bio.get(), nullptr, nullptr, nullptr));
  if (x == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert: ", o.tls_cert, " holds no PEM certificate"));
  }
  BioPtr key_bio = MemBio(l.key_pem);
  KeyPtr k(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr));
  if (k == nullptr) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key: ", o.tls_key, " holds no unencrypted PEM private key"));
  }
  if (X509_check_private_key(x.get(), k.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key: ", o.tls_key, " is not the key of the certificate in ", o.tls_cert));
  }
  if (o.tls_client_ca.empty()) return l;
  absl::StatusOr<std::string> ca = ReadPem("--tls-client-ca", o.tls_client_ca);
  if (!ca.ok()) return ca.status();
  l.ca_pem = *std::move(ca);
  l.client_ca.reset(X509_STORE_new());
  BioPtr ca_bio = MemBio(l.ca_pem);
  int added = 0;
  while (X509Ptr c{PEM_read_bio_X509(ca_bio.get(), nullptr, nullptr, nullptr)}) {
    if (X509_STORE_add_cert(l.client_ca.get(), c.get()) == 1) ++added;
  }
  ERR_clear_error();  // the loop ends on "no start line"
  if (added == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-client-ca: ", o.tls_client_ca, " holds no PEM certificate"));
  }
  return l;
}

// A file in memory at a fixed descriptor: /proc/self/fd/N names it for gRPC's file watcher,
// Replace() swaps its contents atomically (a reader sees the old file or the new one).
class MemFile {
 public:
  MemFile() = default;
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  ~MemFile() {
    if (fd_ >= 0) close(fd_);
  }

  [[nodiscard]] absl::Status Replace(std::string_view content) {
    const int fd = memfd_create("turbokv-tls", MFD_CLOEXEC);
    if (fd < 0) return absl::InternalError(absl::StrCat("memfd_create: ", strerror(errno)));
    for (size_t done = 0; done < content.size();) {
      const ssize_t n = write(fd, content.data() + done, content.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int e = errno;
        close(fd);
        return absl::InternalError(absl::StrCat("writing a memory file: ", strerror(e)));
      }
      done += static_cast<size_t>(n);
    }
    if (fd_ < 0) {
      fd_ = fd;
      return absl::OkStatus();
    }
    const int r = dup3(fd, fd_, O_CLOEXEC);
    const int e = errno;
    close(fd);
    if (r < 0) return absl::InternalError(absl::StrCat("dup3: ", strerror(e)));
    return absl::OkStatus();
  }
  std::string path() const { return absl::StrCat("/proc/self/fd/", fd_); }

 private:
  int fd_ = -1;
};

std::string Sha256Fingerprint(X509* cert) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(cert, EVP_sha256(), md, &len) != 1) return "?";
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(md), static_cast<size_t>(len)));
}

}  // namespace

struct TlsCredentials::State {
  Authenticator* auth = nullptr;
  MemFile cert, key, ca;
  std::mutex reload_mu;  // one reload at a time; guards stamp and the memory files
  std::string stamp;     // FileStamps() of what was last read

  std::mutex mu;  // guards client_ca
  StorePtr client_ca;

  // The verdict on the client certificate `leaf_pem` with the intermediates in `chain_pem`.
  grpc::Status CheckClient(std::string_view leaf_pem, std::string_view chain_pem);
};

grpc::Status TlsCredentials::State::CheckClient(std::string_view leaf_pem,
                                                std::string_view chain_pem) {
  grpc::Status refused(grpc::StatusCode::UNAUTHENTICATED, "client certificate refused");
  if (leaf_pem.empty()) {
    auth->RecordHandshakeFailure(AuthFailure::kTlsNoClientCert, "no client certificate");
    return refused;
  }
  BioPtr leaf_bio = MemBio(leaf_pem);
  X509Ptr leaf(PEM_read_bio_X509(leaf_bio.get(), nullptr, nullptr, nullptr));
  if (leaf == nullptr) {
    ERR_clear_error();
    auth->RecordHandshakeFailure(AuthFailure::kTlsClientCert, "unparseable certificate");
    return refused;
  }
  std::unique_ptr<STACK_OF(X509), StackCloser> untrusted(sk_X509_new_null());
  BioPtr chain_bio = MemBio(chain_pem);
  while (X509* c = PEM_read_bio_X509(chain_bio.get(), nullptr, nullptr, nullptr)) {
    sk_X509_push(untrusted.get(), c);
  }
  ERR_clear_error();
  X509_STORE* store = nullptr;
  {
    std::lock_guard<std::mutex> l(mu);
    store = client_ca.get();
    X509_STORE_up_ref(store);
  }
  StorePtr store_ref(store);
  std::unique_ptr<X509_STORE_CTX, StoreCtxCloser> ctx(X509_STORE_CTX_new());
  int err = X509_V_ERR_UNSPECIFIED;
  bool ok = false;
  if (ctx != nullptr && X509_STORE_CTX_init(ctx.get(), store, leaf.get(), untrusted.get()) == 1) {
    X509_STORE_CTX_set_purpose(ctx.get(), X509_PURPOSE_SSL_CLIENT);
    ok = X509_verify_cert(ctx.get()) == 1;
    if (!ok) err = X509_STORE_CTX_get_error(ctx.get());
  }
  ERR_clear_error();
  if (ok) return grpc::Status::OK;
  auth->RecordHandshakeFailure(
      AuthFailure::kTlsClientCert,
      absl::StrCat(X509_verify_cert_error_string(err), "; certificate sha256 ",
                   Sha256Fingerprint(leaf.get())));
  return refused;
}

namespace {

class ClientCertVerifier final : public grpc::experimental::ExternalCertificateVerifier {
 public:
  explicit ClientCertVerifier(std::shared_ptr<TlsCredentials::State> state)
      : state_(std::move(state)) {}

  bool Verify(grpc::experimental::TlsCustomVerificationCheckRequest* request,
              std::function<void(grpc::Status)> /*callback*/, grpc::Status* sync_status) override {
    const grpc::string_ref leaf = request->peer_cert();
    const grpc::string_ref chain = request->peer_cert_full_chain();
    *sync_status = state_->CheckClient(std::string_view(leaf.data(), leaf.size()),
                                       std::string_view(chain.data(), chain.size()));
    return true;  // answered synchronously
  }
  void Cancel(grpc::experimental::TlsCustomVerificationCheckRequest* /*request*/) override {}

 private:
  const std::shared_ptr<TlsCredentials::State> state_;
};

}  // namespace

TlsCredentials::TlsCredentials(const AuthOptions& options, prometheus::Registry& registry)
    : options_(options),
      reloads_family_(prometheus::BuildCounter()
                          .Name("turbokv_auth_cert_reloads_total")
                          .Help("Reads of the TLS certificate files after start-up (SIGHUP or a "
                                "change on disk), by result (ok; error: the previous "
                                "certificates stay)")
                          .Register(registry)),
      state_(std::make_shared<State>()) {}

absl::StatusOr<std::unique_ptr<TlsCredentials>> TlsCredentials::Create(
    const AuthOptions& options, Authenticator* auth, prometheus::Registry& registry,
    PeriodicTasks& tasks) {
  std::unique_ptr<TlsCredentials> t(new TlsCredentials(options, registry));
  State& s = *t->state_;
  s.auth = auth;
  s.stamp = FileStamps(options);
  absl::StatusOr<Loaded> loaded = Load(options);
  if (!loaded.ok()) return loaded.status();
  const bool mtls = !options.tls_client_ca.empty();
  absl::Status made = s.cert.Replace(loaded->cert_pem);
  if (made.ok()) made = s.key.Replace(loaded->key_pem);
  if (made.ok() && mtls) made = s.ca.Replace(loaded->ca_pem);
  if (!made.ok()) return made;
  s.client_ca = std::move(loaded->client_ca);

  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      s.key.path(), s.cert.path(), mtls ? s.ca.path() : std::string(), kProviderPollSeconds);
  grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  if (mtls) {
    // The CA bundle goes to gRPC only for the CertificateRequest's list of acceptable CAs;
    // the verdict is ClientCertVerifier's (the header says why).
    tls.watch_root_certs();
    tls.set_cert_request_type(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_BUT_DONT_VERIFY);
    tls.set_certificate_verifier(
        grpc::experimental::ExternalCertificateVerifier::Create<ClientCertVerifier>(t->state_));
  } else {
    tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  t->credentials_ = grpc::experimental::TlsServerCredentials(tls);
  t->watch_ = tasks.Add("certificate reload", std::chrono::seconds(options.cert_refresh_seconds),
                        [p = t.get()] { return p->CheckFiles(); });
  return t;
}

TlsCredentials::~TlsCredentials() { watch_.Cancel(); }

absl::Status TlsCredentials::Reload() {
  State& s = *state_;
  std::lock_guard<std::mutex> rl(s.reload_mu);
  const std::string stamp = FileStamps(options_);
  absl::StatusOr<Loaded> loaded = Load(options_);
  absl::Status status = loaded.status();
  if (status.ok()) status = s.key.Replace(loaded->key_pem);
  if (status.ok()) status = s.cert.Replace(loaded->cert_pem);
  if (status.ok() && !options_.tls_client_ca.empty()) status = s.ca.Replace(loaded->ca_pem);
  s.stamp = stamp;  // a failed read is retried when the files change again
  if (!status.ok()) {
    reloads_family_.Add({{"result", "error"}}).Increment();
    spdlog::error("TLS certificates not reloaded, the previous ones stay: {}",
                  std::string(status.message()));
    return status;
  }
  if (loaded->client_ca != nullptr) {
    std::lock_guard<std::mutex> l(s.mu);
    s.client_ca = std::move(loaded->client_ca);
  }
  reloads_family_.Add({{"result", "ok"}}).Increment();
  spdlog::info("TLS certificates reloaded from {}{}: new connections use them within {} s",
               options_.tls_cert,
               options_.tls_client_ca.empty()
                   ? ""
                   : absl::StrCat(" (client CAs ", options_.tls_client_ca, ")"),
               kProviderPollSeconds);
  return absl::OkStatus();
}

absl::Status TlsCredentials::CheckFiles() {
  bool changed = false;
  {
    std::lock_guard<std::mutex> rl(state_->reload_mu);
    changed = FileStamps(options_) != state_->stamp;
  }
  return changed ? Reload() : absl::OkStatus();
}

}  // namespace turbokv::server
