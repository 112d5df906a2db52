#include "server/server_options.h"

#include "gtest/gtest.h"

namespace turbokv::server {
namespace {

TEST(ParseByteSizeTest, UnitsAndErrors) {
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("10GiB"), uint64_t{10} << 30);
  // Past 2^63 (llround's end) and up to 2^64 - 1 it is a number; beyond, "too large".
  EXPECT_EQ(*ParseByteSize("12000000TB"), uint64_t{12000000} * 1000000000000u);
  EXPECT_EQ(ParseByteSize("99999999TiB").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(ParseByteSize("99999999TiB").status().message().find("too large"), std::string::npos);
  EXPECT_EQ(*ParseByteSize("10 gib"), uint64_t{10} << 30);
  EXPECT_EQ(*ParseByteSize("512MiB"), uint64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("1.5KiB"), 1536u);
  EXPECT_EQ(*ParseByteSize("2TiB"), uint64_t{2} << 40);
  EXPECT_EQ(*ParseByteSize("100MB"), 100'000'000u);
  EXPECT_EQ(*ParseByteSize("3GB"), 3'000'000'000u);
  EXPECT_EQ(*ParseByteSize("7KB"), 7000u);
  EXPECT_EQ(*ParseByteSize("64k"), 65536u);
  EXPECT_EQ(*ParseByteSize("12B"), 12u);
  for (const char* bad : {"", "GiB", "10 parsecs", "1.2.3MiB", "-5", "1e3"}) {
    auto r = ParseByteSize(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_NE(ParseByteSize("ten").status().message().find("\"ten\""), std::string::npos);
}

TEST(FormatByteSizeTest, Readable) {
  EXPECT_EQ(FormatByteSize(512), "512 B");
  EXPECT_EQ(FormatByteSize(uint64_t{10} << 30), "10 GiB");
  EXPECT_EQ(FormatByteSize(1536), "1.5 KiB");
}

TEST(FormatByteSizeFlagTest, ExactAndParsedBack) {
  EXPECT_EQ(FormatByteSizeFlag(uint64_t{10} << 30), "10GiB");
  EXPECT_EQ(FormatByteSizeFlag(1000), "1000");
  EXPECT_EQ(FormatByteSizeFlag(1536), "1536");
  EXPECT_EQ(FormatByteSizeFlag(uint64_t{3} << 40), "3TiB");
  EXPECT_EQ(FormatByteSizeFlag(0), "0");
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{4096}, uint64_t{10} << 30,
                     (uint64_t{1} << 50) + 7}) {
    EXPECT_EQ(*ParseByteSize(FormatByteSizeFlag(v)), v) << v;
  }
  // The flag's default text is the options struct's default.
  EXPECT_EQ(*ParseByteSize(FormatByteSizeFlag(StorageOptions().capacity_bytes)),
            StorageOptions().capacity_bytes);
}

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

}  // namespace
}  // namespace turbokv::server
