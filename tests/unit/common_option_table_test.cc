// common/option_table.h on a struct of its own: every kind of entry parses, formats, checks
// its range and names its field and flag in each error.
#include <cstdint>
#include <limits>
#include <string>

#include "common/option_table.h"
#include "gtest/gtest.h"

namespace turbokv {
namespace {

enum class Mode { kFast, kSafe };

struct Inner {
  int period_ms = 100;
};

struct Toy {
  int threads = 4;
  uint32_t count = 7;
  double share = 0.5;
  uint64_t size = uint64_t{64} << 20;
  std::string policy = "lru";
  Mode mode = Mode::kSafe;
  bool loud = false;
  std::string path;
  Inner inner;
};

const OptionTable<Inner>& InnerTable() {
  static const auto* t = [] {
    auto* t = new OptionTable<Inner>;
    t->Number("", "inner.period_ms", &Inner::period_ms, 10, std::numeric_limits<int>::max(),
              OptionUnit::kMilliseconds, "Period");
    return t;
  }();
  return *t;
}

const OptionTable<Toy>& ToyTable() {
  static const auto* t = [] {
    auto* t = new OptionTable<Toy>;
    t->Number("--threads", "toy.threads", &Toy::threads, 0, 64, OptionUnit::kNone, "Threads")
        .Number<uint32_t>("--count", "toy.count", &Toy::count, 1,
                          std::numeric_limits<uint32_t>::max(), OptionUnit::kNone, "Count")
        .Number("--share", "toy.share", &Toy::share, 0.0, 1.0, OptionUnit::kFraction, "Share",
                /*min_exclusive=*/true)
        .Bytes("--size", "toy.size", &Toy::size, 4096, uint64_t{1} << 30, "Size")
        .Text("--policy", "toy.policy", &Toy::policy, "", {"lru", "lrfu"}, "Policy")
        .Enum<Mode>("--mode", "toy.mode", &Toy::mode,
                    {{"fast", Mode::kFast}, {"safe", Mode::kSafe}}, "Mode")
        .Switch("--loud", "toy.loud", &Toy::loud, "Loud")
        .File("--path", "toy.path", &Toy::path, "Path")
        .Include(&Toy::inner, InnerTable());
    return t;
  }();
  return *t;
}

const OptionSpec<Toy>& Spec(std::string_view flag) {
  const OptionSpec<Toy>* s = ToyTable().Find(flag);
  EXPECT_NE(s, nullptr) << flag;
  return *s;
}

TEST(OptionTableTest, RangesAndUnitsAreDescribed) {
  EXPECT_EQ(Spec("--threads").range, "0..64");
  EXPECT_EQ(Spec("--threads").value_name, "N");
  EXPECT_EQ(Spec("--count").range, ">= 1");
  EXPECT_EQ(Spec("--share").range, "(0, 1]");
  EXPECT_EQ(Spec("--share").unit, OptionUnit::kFraction);
  EXPECT_EQ(Spec("--size").range, "4KiB..1GiB");
  EXPECT_EQ(Spec("--size").value_name, "SIZE");
  EXPECT_EQ(Spec("--policy").value_name, "lru|lrfu");
  EXPECT_EQ(Spec("--mode").value_name, "fast|safe");
  EXPECT_TRUE(Spec("--loud").is_switch);
  EXPECT_EQ(OptionHelp(Spec("--threads")), "Threads [0..64]");
  EXPECT_EQ(OptionHelp(Spec("--share")), "Share [fraction; (0, 1]]");
  EXPECT_EQ(OptionHelp(Spec("--policy")), "Policy");
  ASSERT_EQ(ToyTable().specs().size(), 9u);
  const OptionSpec<Toy>& inner = ToyTable().specs().back();
  EXPECT_EQ(inner.field, "inner.period_ms");
  EXPECT_EQ(OptionHelp(inner), "Period [milliseconds; >= 10]");
}

TEST(OptionTableTest, DefaultsFormatAndParseBack) {
  const Toy defaults;
  EXPECT_TRUE(ToyTable().Validate(defaults).ok());
  EXPECT_EQ(Spec("--threads").format(defaults), "4");
  EXPECT_EQ(Spec("--share").format(defaults), "0.5");
  EXPECT_EQ(Spec("--size").format(defaults), "64MiB");
  EXPECT_EQ(Spec("--mode").format(defaults), "safe");
  EXPECT_EQ(Spec("--loud").format(defaults), "false");
  for (const OptionSpec<Toy>& s : ToyTable().specs()) {
    Toy t;
    t.threads = 0;  // parse must write the field back, not leave it alone
    t.size = 4096;
    t.share = 1.0;
    t.mode = Mode::kFast;
    ASSERT_TRUE(s.parse(t, s.format(defaults)).ok()) << s.field;
    EXPECT_EQ(s.format(t), s.format(defaults)) << s.field;
  }
}

TEST(OptionTableTest, ParseSetsTheFieldAndChecksTheRange) {
  Toy t;
  ASSERT_TRUE(Spec("--size").parse(t, "10MiB").ok());
  EXPECT_EQ(t.size, uint64_t{10} << 20);
  ASSERT_TRUE(Spec("--size").parse(t, "1.5KiB").ok() == false);  // 1536 < 4 KiB
  ASSERT_TRUE(Spec("--size").parse(t, "100MB").ok());
  EXPECT_EQ(t.size, 100'000'000u);
  ASSERT_TRUE(Spec("--mode").parse(t, "fast").ok());
  EXPECT_EQ(t.mode, Mode::kFast);
  ASSERT_TRUE(Spec("--loud").parse(t, "true").ok());
  EXPECT_TRUE(t.loud);
  ASSERT_TRUE(Spec("--share").parse(t, "1").ok());
  EXPECT_EQ(t.share, 1.0);

  struct Bad {
    const char* flag;
    const char* text;
    const char* message;
  };
  for (const Bad& b : {
           Bad{"--threads", "65", "toy.threads 65 (--threads) is outside 0..64"},
           Bad{"--threads", "-1", "toy.threads -1 (--threads) is outside 0..64"},
           Bad{"--threads", "four", "toy.threads \"four\" (--threads) is not an integer in 0..64"},
           Bad{"--threads", "99999999999", "is not an integer in 0..64"},
           Bad{"--count", "0", "toy.count 0 (--count) is outside >= 1"},
           Bad{"--count", "-3", "toy.count \"-3\" (--count) is not an integer"},
           Bad{"--share", "0", "toy.share 0 (--share) is outside (0, 1]"},
           Bad{"--share", "nan", "toy.share nan (--share) is outside (0, 1]"},
           Bad{"--size", "2GiB", "toy.size 2GiB (--size) is outside 4KiB..1GiB"},
           Bad{"--size", "10XB", "toy.size \"10XB\" (--size): byte size \"10XB\" is not a number"},
           Bad{"--policy", "fifo", "toy.policy \"fifo\" (--policy) is not one of lru, lrfu"},
           Bad{"--mode", "slow", "toy.mode \"slow\" (--mode) is not one of fast, safe"},
           Bad{"--loud", "maybe", "toy.loud \"maybe\" (--loud) is not true, false, 1 or 0"},
           Bad{"--path", "/nonexistent/x.pem",
               "toy.path \"/nonexistent/x.pem\" (--path): no such file"},
           Bad{"--path", "/", "is a directory"},
       }) {
    Toy t;
    absl::Status s = Spec(b.flag).parse(t, b.text);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.flag << " " << b.text;
    EXPECT_NE(s.message().find(b.message), std::string::npos) << s.message();
  }
}

TEST(OptionTableTest, ValidateNamesTheFirstFieldOutOfRange) {
  Toy t;
  t.inner.period_ms = 5;
  EXPECT_EQ(ToyTable().Validate(t).message(), "inner.period_ms 5 is outside >= 10");
  t.size = 0;
  EXPECT_EQ(ToyTable().Validate(t).message(), "toy.size 0 (--size) is outside 4KiB..1GiB");
  t = Toy();
  t.path = "/does/not/matter";  // existence is the command line's check, not Validate's
  EXPECT_TRUE(ToyTable().Validate(t).ok());
}

}  // namespace
}  // namespace turbokv
