// server/auth: the token file, hashed tokens, loopback peers, AuthOptions validation.
#include <string>

#include "gtest/gtest.h"
#include "server/auth/auth_options.h"
#include "server/auth/authenticator.h"
#include "server/auth/token_table.h"

namespace turbokv::server {
namespace {

TEST(TokenTableTest, Sha256MatchesTheKnownDigest) {
  // printf '%s' abc | sha256sum (FIPS 180-2, appendix B.1).
  EXPECT_EQ(Sha256Text("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(TokenTableTest, ParsesTokensCertsQuotasAndFindsThem) {
  const std::string text =
      "# comment\n\n"
      "token " +
      Sha256Text("secret-a") +
      " team-a\n"
      "token " +
      Sha256Text("secret-ops") +
      "  ops   admin  # operators\n"
      "cert svc-b.example team-b\n"
      "quota team-a 10GiB\r\n";
  absl::StatusOr<TokenTable> t = ParseTokenTable(text);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->tokens.size(), 2u);
  const Principal* a = t->FindToken("secret-a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->tenant, "team-a");
  EXPECT_FALSE(a->admin);
  const Principal* ops = t->FindToken("secret-ops");
  ASSERT_NE(ops, nullptr);
  EXPECT_TRUE(ops->admin);
  EXPECT_EQ(t->FindToken("secret-b"), nullptr);
  EXPECT_EQ(t->FindToken(""), nullptr);
  EXPECT_EQ(t->FindToken(Sha256Text("secret-a")), nullptr);  // the digest is no token
  ASSERT_NE(t->FindCert("svc-b.example"), nullptr);
  EXPECT_EQ(t->FindCert("svc-b.example")->tenant, "team-b");
  EXPECT_EQ(t->FindCert("svc-c.example"), nullptr);
  EXPECT_EQ(t->quotas.at("team-a"), uint64_t{10} << 30);
}

TEST(TokenTableTest, BadLinesNameTheLineAndNeverEchoTheLine) {
  for (const auto& [text, want] : std::vector<std::pair<std::string, std::string>>{
           {"token plain-secret team-a\n", "line 1: a token is stored as sha256:"},
           {"\ntoken " + Sha256Text("x") + "\n", "line 2: the tenant is missing"},
           {"token " + Sha256Text("x") + " team/a\n", "line 1: a tenant name"},
           {"token " + Sha256Text("x") + " a root\n", "only \"admin\" may follow"},
           {"plain-secret\n", "line 1: an entry starts with token, cert or quota"},
           {"quota team-a lots\n", "line 1: byte size"},
           {"token sha256:" + std::string(64, 'g') + " a\n", "non-hex"},
       }) {
    absl::StatusOr<TokenTable> t = ParseTokenTable(text);
    ASSERT_FALSE(t.ok()) << text;
    EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(want), std::string::npos) << t.status();
    EXPECT_EQ(t.status().message().find("plain-secret"), std::string::npos) << t.status();
  }
}

TEST(TokenTableTest, TenantNames) {
  EXPECT_TRUE(ValidTenantName("team-a.prod_1"));
  EXPECT_TRUE(ValidTenantName(std::string(64, 'a')));
  EXPECT_FALSE(ValidTenantName(""));
  EXPECT_FALSE(ValidTenantName(std::string(65, 'a')));
  EXPECT_FALSE(ValidTenantName("a b"));
  EXPECT_FALSE(ValidTenantName("a{b}"));
}

TEST(AuthenticatorTest, LoopbackPeers) {
  EXPECT_TRUE(IsLoopbackPeer("ipv4:127.0.0.1:5000"));
  EXPECT_TRUE(IsLoopbackPeer("ipv4:127.8.9.1:5000"));
  EXPECT_TRUE(IsLoopbackPeer("ipv6:[::1]:5000"));
  EXPECT_TRUE(IsLoopbackPeer("ipv6:%5B::1%5D:5000"));
  EXPECT_TRUE(IsLoopbackPeer("ipv6:[::ffff:127.0.0.1]:5000"));
  EXPECT_TRUE(IsLoopbackPeer("unix:/tmp/sock"));
  EXPECT_FALSE(IsLoopbackPeer("ipv4:10.0.0.1:5000"));
  EXPECT_FALSE(IsLoopbackPeer("ipv4:1.127.0.1:5000"));
  EXPECT_FALSE(IsLoopbackPeer("ipv6:[::2]:5000"));
  EXPECT_FALSE(IsLoopbackPeer("ipv6:[::ffff:10.0.0.1]:5000"));
  EXPECT_FALSE(IsLoopbackPeer(""));
}

TEST(AuthOptionsTest, Validate) {
  AuthOptions o;
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_FALSE(o.authenticates());
  o.tls_cert = "c.pem";
  EXPECT_NE(o.Validate().message().find("go together"), std::string::npos);
  o.tls_key = "k.pem";
  EXPECT_TRUE(o.Validate().ok());
  o = AuthOptions();
  o.tls_client_ca = "ca.pem";
  EXPECT_NE(o.Validate().message().find("needs --tls-cert"), std::string::npos);
  EXPECT_TRUE(o.authenticates());
}

}  // namespace
}  // namespace turbokv::server
