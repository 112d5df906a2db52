#include "server/server_options.h"

#include "gtest/gtest.h"

namespace turbokv::server {
namespace {

TEST(ServerOptionsTest, DefaultsValidateAndBadValuesNameTheField) {
  ServerOptions o;
  EXPECT_TRUE(o.Validate().ok());
  EXPECT_EQ(o.listen_address, "0.0.0.0:50051");
  EXPECT_EQ(o.storage.durability, Durability::kWal);
  EXPECT_EQ(o.codec.default_preset, "k5v4");

  o.codec.default_preset = "k9v9";
  absl::Status s = o.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("default_preset"), std::string::npos) << s;

  o = ServerOptions();
  o.codec.threads = -1;
  EXPECT_NE(o.Validate().message().find("codec.threads"), std::string::npos);

  o = ServerOptions();
  o.storage.high_watermark = 1.5;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);

  // The in-flight budget's per-tenant share and timers (docs/server.md, "Limits").
  o = ServerOptions();
  EXPECT_EQ(o.limits.tenant_in_flight_share, 0.5);
  EXPECT_EQ(o.limits.stream_idle_timeout_ms, 30000);
  EXPECT_EQ(o.limits.default_deadline_ms, 600000);
  for (double share : {0.0, -0.1, 1.01}) {
    o.limits.tenant_in_flight_share = share;
    EXPECT_NE(o.Validate().message().find("limits.tenant_in_flight_share"), std::string::npos)
        << share;
  }
  o = ServerOptions();
  o.limits.tenant_in_flight_share = 1.0;
  o.limits.stream_idle_timeout_ms = 0;
  o.limits.default_deadline_ms = 0;
  EXPECT_TRUE(o.Validate().ok());
  o.limits.stream_idle_timeout_ms = -1;
  EXPECT_NE(o.Validate().message().find("stream_idle_timeout_ms"), std::string::npos);

  EXPECT_EQ(*ParseCodecBackendKind("cuda"), CodecBackendKind::kCuda);
  EXPECT_EQ(ParseCodecBackendKind("tpu").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ServerOptionsTest, ListenAddressNeedsAPort) {
  for (const char* ok : {"0.0.0.0:50051", "127.0.0.1:0", "[::]:50051", "[::1]:0", "localhost:9000",
                         "unix:/tmp/turbokv.sock"}) {
    EXPECT_TRUE(ValidateListenAddress("listen_address", ok).ok()) << ok;
  }
  for (const char* bad :
       {"127.0.0.1", "localhost", "::1", ":50051", "host:", "host:99999", "host:5x"}) {
    absl::Status s = ValidateListenAddress("listen_address", bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("is not HOST:PORT"), std::string::npos) << s;
  }
  ServerOptions o;
  o.listen_address = "0.0.0.0";
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ServerOptions().metrics.listen_address, "127.0.0.1:9464");  // loopback by default
}

}  // namespace
}  // namespace turbokv::server
