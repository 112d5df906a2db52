#include "server/auth/authenticator.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/security/auth_context.h"
#include "spdlog/spdlog.h"

namespace turbokv::server {
namespace {

constexpr int kAuditLinesPerSecond = 20;

// (This Abseil's absl::string_view is not std::string_view.)
bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool StartsWithIgnoreCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(s[i])) !=
        absl::ascii_tolower(static_cast<unsigned char>(prefix[i]))) {
      return false;
    }
  }
  return true;
}

// "mtime-ns size inode", or "" when the file cannot be stat'ed.
std::string FileStamp(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return "";
  return absl::StrCat(st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, " ", st.st_size, " ", st.st_ino);
}

// The token file's text. NOT_FOUND when it cannot be opened, FAILED_PRECONDITION when the path
// (after symlinks) is not a regular file: a directory opens with ifstream and reads as empty
// text, which would parse as a table without tokens and refuse every caller, admin included.
absl::StatusOr<std::string> ReadFile(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the token file ", path, ": ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the token file ", path, " is not a regular file (",
                     S_ISDIR(st.st_mode) ? "a directory" : "a device, FIFO or socket", ")"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the token file ", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::UnavailableError(absl::StrCat("reading the token file ", path, " failed"));
  }
  return text.str();
}

}  // namespace

const char* AuthFailureName(AuthFailure reason) {
  switch (reason) {
    case AuthFailure::kMissingCredentials:
      return "missing_credentials";
    case AuthFailure::kInvalidToken:
      return "invalid_token";
    case AuthFailure::kUnknownCertificate:
      return "unknown_certificate";
    case AuthFailure::kNotLoopback:
      return "not_loopback";
    case AuthFailure::kTlsNoClientCert:
      return "tls_no_client_cert";
    case AuthFailure::kTlsClientCert:
      return "tls_client_cert";
  }
  return "unknown";
}

bool IsLoopbackPeer(std::string_view peer) {
  if (StartsWith(peer, "unix:")) return true;
  if (StartsWith(peer, "ipv4:")) return StartsWith(peer.substr(5), "127.");
  if (!StartsWith(peer, "ipv6:")) return false;
  std::string_view host = peer.substr(5);
  if (StartsWith(host, "%5B") || StartsWith(host, "%5b")) {
    host = host.substr(3);
  } else if (StartsWith(host, "[")) {
    host = host.substr(1);
  } else {
    return false;
  }
  const size_t end = host.find_first_of("]%");
  if (end == std::string_view::npos) return false;
  host = host.substr(0, end);
  return host == "::1" || StartsWithIgnoreCase(host, "::ffff:127.");
}

Authenticator::Authenticator(const AuthOptions& options, prometheus::Registry& registry)
    : options_(options),
      failures_family_(prometheus::BuildCounter()
                           .Name("turbokv_auth_failures_total")
                           .Help("TurboKV calls and TLS handshakes refused by "
                                 "authentication, by reason (missing_credentials, "
                                 "invalid_token, unknown_certificate, not_loopback, "
                                 "tls_no_client_cert, tls_client_cert)")
                           .Register(registry)),
      reloads_family_(prometheus::BuildCounter()
                          .Name("turbokv_auth_token_file_reloads_total")
                          .Help("Token file reads after start-up (SIGHUP or a change on disk), "
                                "by result (ok; error: the previous table stays)")
                          .Register(registry)) {}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(const AuthOptions& options,
                                                                     prometheus::Registry& registry,
                                                                     PeriodicTasks& tasks) {
  std::unique_ptr<Authenticator> a(new Authenticator(options, registry));
  a->table_ = std::make_shared<TokenTable>();
  if (!options.token_file.empty()) {
    const std::string stamp = FileStamp(options.token_file);
    absl::StatusOr<std::string> text = ReadFile(options.token_file);
    if (!text.ok()) return text.status();
    absl::StatusOr<TokenTable> table = ParseTokenTable(*text);
    if (!table.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(options.token_file, ": ", table.status().message()));
    }
    a->table_ = std::make_shared<TokenTable>(*std::move(table));
    a->file_stamp_ = stamp;
    a->watch_ = tasks.Add("token-file reload", std::chrono::milliseconds(options.token_reload_ms),
                          [p = a.get()] { return p->CheckFile(); });
  }
  return a;
}

Authenticator::~Authenticator() { watch_.Cancel(); }

absl::Status Authenticator::Reload() {
  if (options_.token_file.empty()) return absl::OkStatus();
  const std::string stamp = FileStamp(options_.token_file);
  absl::StatusOr<TokenTable> table = [&]() -> absl::StatusOr<TokenTable> {
    absl::StatusOr<std::string> text = ReadFile(options_.token_file);
    if (!text.ok()) return text.status();
    return ParseTokenTable(*text);
  }();
  if (!table.ok()) {
    reloads_family_.Add({{"result", "error"}}).Increment();
    {
      std::lock_guard<std::mutex> l(mu_);
      file_stamp_ = stamp;  // not retried until the file changes again
    }
    spdlog::error("token file {} not reloaded, the previous tokens stay: {}", options_.token_file,
                  std::string(table.status().message()));
    return table.status();
  }
  auto next = std::make_shared<const TokenTable>(*std::move(table));
  {
    std::lock_guard<std::mutex> l(mu_);
    table_ = next;
    file_stamp_ = stamp;
  }
  reloads_family_.Add({{"result", "ok"}}).Increment();
  spdlog::info("token file {} reloaded: {} tokens, {} certificate identities, {} quotas",
               options_.token_file, next->tokens.size(), next->certs.size(), next->quotas.size());
  return absl::OkStatus();
}

absl::Status Authenticator::CheckFile() {
  const std::string stamp = FileStamp(options_.token_file);
  bool changed = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    changed = stamp != file_stamp_;
  }
  return changed ? Reload() : absl::OkStatus();
}

uint64_t Authenticator::QuotaBytes(std::string_view tenant) const {
  std::shared_ptr<const TokenTable> table;
  {
    std::lock_guard<std::mutex> l(mu_);
    table = table_;
  }
  if (auto it = table->quotas.find(std::string(tenant)); it != table->quotas.end()) {
    return it->second;
  }
  return options_.default_tenant_quota_bytes;
}

absl::Status Authenticator::Refuse(AuthFailure reason, absl::Status status,
                                   const grpc::ServerContextBase& ctx, std::string_view method) {
  Audit(reason, absl::StrCat(std::string(method), " from ", ctx.peer()), "");
  return status;
}

void Authenticator::RecordHandshakeFailure(AuthFailure reason, std::string_view detail) {
  Audit(reason, "TLS handshake", detail);
}

void Authenticator::Audit(AuthFailure reason, const std::string& what, std::string_view detail) {
  failures_family_.Add({{"reason", AuthFailureName(reason)}}).Increment();
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  uint64_t suppressed = 0;
  {
    std::lock_guard<std::mutex> l(audit_mu_);
    if (now != audit_second_) {
      audit_second_ = now;
      audit_lines_ = 0;
    }
    if (audit_lines_ >= kAuditLinesPerSecond) {
      ++audit_suppressed_;
      return;
    }
    ++audit_lines_;
    suppressed = std::exchange(audit_suppressed_, 0);
  }
  spdlog::warn("audit: refused {}: {}{}{}", what, AuthFailureName(reason),
               detail.empty() ? std::string() : absl::StrCat(" (", std::string(detail), ")"),
               suppressed == 0 ? std::string()
                               : absl::StrCat(" (", suppressed, " earlier refusals not logged)"));
}

absl::StatusOr<Principal> Authenticator::Authenticate(const grpc::ServerContextBase& context,
                                                      std::string_view method) {
  if (!options_.authenticates()) {
    if (!options_.insecure_allow_remote && !IsLoopbackPeer(context.peer())) {
      return Refuse(AuthFailure::kNotLoopback,
                    absl::PermissionDeniedError(
                        "protected mode: this server has no authentication configured and "
                        "answers loopback clients only; configure --token-file or "
                        "--tls-client-ca, or start it with --insecure-allow-remote"),
                    context, method);
    }
    return Principal{"", true};
  }
  std::shared_ptr<const TokenTable> table;
  {
    std::lock_guard<std::mutex> l(mu_);
    table = table_;
  }
  const auto& metadata = context.client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) {
    std::string_view value(it->second.data(), it->second.size());
    constexpr std::string_view kBearer = "bearer ";
    if (value.size() > kBearer.size() && StartsWithIgnoreCase(value, kBearer)) {
      if (const Principal* p = table->FindToken(value.substr(kBearer.size()))) return *p;
    }
    return Refuse(AuthFailure::kInvalidToken,
                  absl::UnauthenticatedError("the bearer token is not valid"), context, method);
  }
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const char* property : {"x509_subject_alternative_name", "x509_common_name"}) {
      for (const grpc::string_ref& id : auth->FindPropertyValues(property)) {
        if (const Principal* p = table->FindCert(std::string_view(id.data(), id.size()))) {
          return *p;
        }
      }
    }
    if (options_.token_file.empty()) return Principal{"", true};
    return Refuse(AuthFailure::kUnknownCertificate,
                  absl::UnauthenticatedError(
                      "the client certificate is not named in the server's token file"),
                  context, method);
  }
  return Refuse(AuthFailure::kMissingCredentials,
                absl::UnauthenticatedError(
                    "this server needs credentials: authorization: Bearer <token> metadata or a "
                    "client certificate it knows"),
                context, method);
}

}  // namespace turbokv::server
