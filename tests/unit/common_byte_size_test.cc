// common/byte_size.h: the one parser and formatter of byte sizes (flags, the token file's
// quotas, logs, the CLI's tables).
#include "common/byte_size.h"
#include "gtest/gtest.h"

namespace turbokv {
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
  EXPECT_EQ(FormatByteSize(0), "0 B");
  EXPECT_EQ(FormatByteSize(512), "512 B");
  EXPECT_EQ(FormatByteSize(1023), "1023 B");
  EXPECT_EQ(FormatByteSize(1024), "1 KiB");
  EXPECT_EQ(FormatByteSize(1536), "1.5 KiB");
  EXPECT_EQ(FormatByteSize(376832), "368 KiB");
  EXPECT_EQ(FormatByteSize(uint64_t{3} << 29), "1.5 GiB");
  EXPECT_EQ(FormatByteSize(uint64_t{10} << 30), "10 GiB");
  // 4 significant digits: 1 MiB - 1 byte is "1 MiB", not "1024 KiB".
  EXPECT_EQ(FormatByteSize((uint64_t{1} << 20) - 1), "1 MiB");
  EXPECT_EQ(FormatByteSize(uint64_t{1234567}), "1.177 MiB");
  EXPECT_EQ(FormatByteSize(~uint64_t{0}), "16 EiB");
}

TEST(FormatByteSizeFlagTest, ExactAndParsedBack) {
  EXPECT_EQ(FormatByteSizeFlag(uint64_t{10} << 30), "10GiB");
  EXPECT_EQ(FormatByteSizeFlag(1000), "1000");
  EXPECT_EQ(FormatByteSizeFlag(1536), "1536");
  EXPECT_EQ(FormatByteSizeFlag(uint64_t{3} << 40), "3TiB");
  EXPECT_EQ(FormatByteSizeFlag(0), "0");
  for (uint64_t v :
       {uint64_t{0}, uint64_t{1}, uint64_t{4096}, uint64_t{10} << 30, (uint64_t{1} << 50) + 7}) {
    EXPECT_EQ(*ParseByteSize(FormatByteSizeFlag(v)), v) << v;
  }
}

}  // namespace
}  // namespace turbokv
