// The command line made from the option table (server/server_flags.h): every flag keeps its
// name, default, range and unit (pinned below against the table); its default text parses
// back to the default; out-of-range values and bad units fail the parse naming the flag; every
// flag is documented in docs/server.md with its default.
#include "server/server_flags.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace turbokv::server {
namespace {

// Parses `args` (without the program name) into a fresh ServerOptions; the CLI11 error's
// message, or "" on success.
std::string Parse(const std::vector<std::string>& args, ServerOptions* options) {
  CLI::App app{"test"};
  AddServerFlags(app, options);
  std::vector<std::string> argv = args;
  std::reverse(argv.begin(), argv.end());  // CLI11 takes them last-first
  try {
    app.parse(argv);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

struct Pinned {
  std::string default_text;
  std::string range;
  OptionUnit unit;
};

// Every flag of the table as it stands: a change to a name, default, range or unit fails here
// and must be deliberate (the Kubernetes manifests and docs/server.md use these flags).
const std::map<std::string, Pinned>& PinnedFlags() {
  using U = OptionUnit;
  static const auto* pinned = new std::map<std::string, Pinned>{
      {"--listen", {"0.0.0.0:50051", "", U::kNone}},
      {"--health-listen", {"", "", U::kNone}},
      {"--metrics-listen", {"127.0.0.1:9464", "", U::kNone}},
      {"--kv-events-listen", {"", "", U::kNone}},
      {"--data-dir", {"./turbokv-data", "", U::kNone}},
      {"--capacity", {"10GiB", ">= 1", U::kBytes}},
      {"--high-watermark", {"0.995", "0.01..1", U::kFraction}},
      {"--low-watermark", {"0.99", "0.01..1", U::kFraction}},
      {"--eviction-policy", {"lrfu", "one of lrfu, lru", U::kNone}},
      {"--ignore-client-tuning", {"false", "", U::kNone}},
      {"--segment-bytes", {"256MiB", "1MiB..4GiB", U::kBytes}},
      {"--read-cache-bytes", {"64MiB", ">= 0", U::kBytes}},
      {"--durability", {"wal", "one of none, wal, fsync", U::kNone}},
      {"--codec-backend", {"auto", "one of auto, cpu, cuda", U::kNone}},
      {"--codec-threads", {"0", "0..1024", U::kNone}},
      {"--io-threads", {"0", "0..1024", U::kNone}},
      {"--max-block-bytes", {"256MiB", "4KiB..1GiB", U::kBytes}},
      {"--max-codec-setup-bytes", {"64MiB", ">= 1MiB", U::kBytes}},
      {"--max-namespaces", {"4096", ">= 1", U::kNone}},
      {"--max-namespaces-per-tenant", {"256", ">= 1", U::kNone}},
      {"--max-descriptor-string-bytes", {"256", ">= 1", U::kNone}},
      {"--max-lease-seconds", {"3600", ">= 1", U::kSeconds}},
      {"--max-hashes-per-call", {"16384", ">= 1", U::kNone}},
      {"--max-in-flight-bytes", {"1GiB", ">= 4MiB", U::kBytes}},
      {"--admission-timeout-ms", {"10000", ">= 0", U::kMilliseconds}},
      {"--tenant-in-flight-share", {"0.5", "0.001..1", U::kFraction}},
      {"--stream-idle-timeout-ms", {"30000", ">= 0", U::kMilliseconds}},
      {"--default-deadline-ms", {"600000", ">= 0", U::kMilliseconds}},
      {"--max-queued-tasks", {"4096", ">= 1", U::kNone}},
      {"--max-stats-namespaces", {"256", ">= 1", U::kNone}},
      {"--default-preset", {"k5v4", "", U::kNone}},  // range: the codec's preset list
      {"--shutdown-grace-ms", {"5000", ">= 0", U::kMilliseconds}},
      {"--tls-cert", {"", "", U::kNone}},
      {"--tls-key", {"", "", U::kNone}},
      {"--tls-client-ca", {"", "", U::kNone}},
      {"--cert-refresh-seconds", {"60", "1..86400", U::kSeconds}},
      {"--token-file", {"", "", U::kNone}},
      {"--token-reload-ms", {"2000", "50..3600000", U::kMilliseconds}},
      {"--insecure-allow-remote", {"false", "", U::kNone}},
      {"--default-tenant-quota", {"0", ">= 0", U::kBytes}},
  };
  return *pinned;
}

TEST(ServerFlagsTest, EveryFlagKeepsItsNameDefaultRangeAndUnit) {
  const ServerOptions defaults;
  std::set<std::string> flags;
  for (const auto& spec : ServerOptionTable().specs()) {
    if (spec.flag.empty()) continue;
    EXPECT_TRUE(flags.insert(spec.flag).second) << "two entries for " << spec.flag;
    EXPECT_FALSE(spec.help.empty()) << spec.flag;
    auto it = PinnedFlags().find(spec.flag);
    ASSERT_NE(it, PinnedFlags().end()) << spec.flag << " is new: pin it here";
    EXPECT_EQ(spec.format(defaults), it->second.default_text) << spec.flag;
    if (spec.flag != "--default-preset") {
      EXPECT_EQ(spec.range, it->second.range) << spec.flag;
    }
    EXPECT_EQ(spec.unit, it->second.unit) << spec.flag;
  }
  EXPECT_EQ(flags.size(), PinnedFlags().size());
  EXPECT_EQ(FlagEnvName("--max-block-bytes"), "TURBOKV_MAX_BLOCK_BYTES");
}

TEST(ServerFlagsTest, EachDefaultTextParsesBackToTheDefault) {
  const ServerOptions defaults;
  for (const auto& spec : ServerOptionTable().specs()) {
    if (spec.flag.empty() || spec.is_switch) continue;
    ServerOptions o;
    // Start every field of the entry away from its default where the range allows, so the
    // parse has to write it.
    (void)spec.parse(o, spec.flag == "--capacity" ? "1" : "0");
    const std::string text = spec.format(defaults);
    ASSERT_EQ(Parse({spec.flag, text}, &o), "") << spec.flag << " " << text;
    EXPECT_EQ(spec.format(o), text) << spec.flag;
  }
  ServerOptions o;
  ASSERT_EQ(Parse({"--insecure-allow-remote"}, &o), "");
  EXPECT_TRUE(o.auth.insecure_allow_remote);
  EXPECT_TRUE(ServerOptions().Validate().ok());
}

TEST(ServerFlagsTest, SizesTakeTheirUnits) {
  for (const auto& [text, bytes] :
       std::vector<std::pair<std::string, uint64_t>>{{"10GiB", uint64_t{10} << 30},
                                                     {"512MiB", uint64_t{512} << 20},
                                                     {"2TiB", uint64_t{2} << 40},
                                                     {"100MB", 100'000'000},
                                                     {"3GB", 3'000'000'000},
                                                     {"4096", 4096},
                                                     {"10 gib", uint64_t{10} << 30},
                                                     {"1.5KiB", 1536},
                                                     {"64k", 65536}}) {
    ServerOptions o;
    ASSERT_EQ(Parse({"--capacity", text}, &o), "") << text;
    EXPECT_EQ(o.storage.capacity_bytes, bytes) << text;
  }
  ServerOptions o;
  ASSERT_EQ(Parse({"--max-block-bytes=1MiB", "--segment-bytes", "1GiB", "--default-tenant-quota",
                   "200GiB", "--max-in-flight-bytes", "64MiB", "--max-codec-setup-bytes", "8MB"},
                  &o),
            "");
  EXPECT_EQ(o.limits.max_block_bytes, uint64_t{1} << 20);
  EXPECT_EQ(o.storage.segment_bytes, uint64_t{1} << 30);
  EXPECT_EQ(o.auth.default_tenant_quota_bytes, uint64_t{200} << 30);
  EXPECT_EQ(o.limits.max_in_flight_bytes, uint64_t{64} << 20);
  EXPECT_EQ(o.limits.max_codec_setup_bytes, 8'000'000u);
}

TEST(ServerFlagsTest, EnvironmentVariablesSetFlagsAndTheCommandLineWins) {
  ASSERT_EQ(setenv("TURBOKV_CAPACITY", "80GiB", 1), 0);
  ASSERT_EQ(setenv("TURBOKV_CODEC_BACKEND", "cpu", 1), 0);
  ASSERT_EQ(setenv("TURBOKV_INSECURE_ALLOW_REMOTE", "true", 1), 0);
  ServerOptions o;
  EXPECT_EQ(Parse({"--codec-backend", "auto"}, &o), "");
  EXPECT_EQ(o.storage.capacity_bytes, uint64_t{80} << 30);
  EXPECT_EQ(o.codec.backend, CodecBackendKind::kAuto);
  EXPECT_TRUE(o.auth.insecure_allow_remote);
  ASSERT_EQ(setenv("TURBOKV_CAPACITY", "80 parsecs", 1), 0);
  ServerOptions bad;
  EXPECT_NE(Parse({}, &bad).find("--capacity"), std::string::npos);
  unsetenv("TURBOKV_CAPACITY");
  unsetenv("TURBOKV_CODEC_BACKEND");
  unsetenv("TURBOKV_INSECURE_ALLOW_REMOTE");
}

TEST(ServerFlagsTest, OutOfRangeAndBadUnitsNameTheFlag) {
  struct Bad {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Bad& b : std::vector<Bad>{
           {{"--codec-threads", "1025"}, "codec.threads 1025 (--codec-threads) is outside 0..1024"},
           {{"--io-threads", "-1"}, "codec.io_threads -1 (--io-threads) is outside 0..1024"},
           {{"--capacity", "10XB"}, "storage.capacity_bytes \"10XB\" (--capacity): byte size"},
           {{"--capacity", "0"}, "storage.capacity_bytes 0 (--capacity) is outside >= 1"},
           {{"--segment-bytes", "8GiB"},
            "storage.segment_bytes 8GiB (--segment-bytes) is outside 1MiB..4GiB"},
           {{"--max-block-bytes", "1KiB"},
            "limits.max_block_bytes 1KiB (--max-block-bytes) is outside 4KiB..1GiB"},
           {{"--max-in-flight-bytes", "1MiB"}, "(--max-in-flight-bytes) is outside >= 4MiB"},
           {{"--high-watermark", "1.5"}, "(--high-watermark) is outside 0.01..1"},
           {{"--tenant-in-flight-share", "0"}, "(--tenant-in-flight-share) is outside 0.001..1"},
           {{"--durability", "sometimes"},
            "storage.durability \"sometimes\" (--durability) is not one of none, wal, fsync"},
           {{"--eviction-policy", "fifo"}, "(--eviction-policy) is not one of lrfu, lru"},
           {{"--default-preset", "k9v9"}, "codec.default_preset \"k9v9\" (--default-preset)"},
           {{"--max-namespaces", "0"}, "(--max-namespaces) is outside >= 1"},
           {{"--max-namespaces", "5000000000"}, "(--max-namespaces) is not an integer"},
           {{"--admission-timeout-ms", "soon"}, "(--admission-timeout-ms) is not an integer"},
           {{"--cert-refresh-seconds", "0"}, "(--cert-refresh-seconds) is outside 1..86400"},
           {{"--token-reload-ms", "10"}, "(--token-reload-ms) is outside 50..3600000"},
           {{"--tls-cert", "/nonexistent/cert.pem"}, "(--tls-cert): no such file"},
       }) {
    ServerOptions o;
    const std::string error = Parse(b.args, &o);
    EXPECT_NE(error.find(b.message), std::string::npos) << b.args[0] << ": " << error;
  }
}

TEST(ServerFlagsTest, ValidateUsesTheSameRanges) {
  ServerOptions o;
  o.codec.io_threads = 1025;
  EXPECT_EQ(o.Validate().message(), "codec.io_threads 1025 (--io-threads) is outside 0..1024");
  o = ServerOptions();
  o.storage.segment_bytes = uint64_t{8} << 30;
  EXPECT_EQ(o.Validate().message(),
            "storage.segment_bytes 8GiB (--segment-bytes) is outside 1MiB..4GiB");
  o = ServerOptions();
  o.max_receive_message_bytes = 1 << 20;  // a field without a flag
  EXPECT_EQ(o.Validate().message(), "max_receive_message_bytes 1048576 is outside >= 1052672");
  o = ServerOptions();
  o.storage.low_watermark = 0.9;
  o.storage.high_watermark = 0.8;
  EXPECT_NE(o.Validate().message().find("(--low-watermark) is above"), std::string::npos);
}

// docs/server.md lists every flag, in a table row that states its default.
TEST(ServerFlagsTest, DocsListEveryFlagWithItsDefault) {
  std::ifstream in(TURBOKV_SOURCE_DIR "/docs/server.md");
  ASSERT_TRUE(in) << "docs/server.md";
  std::vector<std::string> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| `--", 0) == 0) rows.push_back(line);
  }
  const ServerOptions defaults;
  for (const auto& spec : ServerOptionTable().specs()) {
    if (spec.flag.empty()) continue;
    const std::string cell = "`" + spec.flag;
    const std::string* row = nullptr;
    for (const std::string& r : rows) {
      const size_t at = r.find(cell);
      const size_t end = at + cell.size();
      if (at != std::string::npos && at < r.find(" | ") &&
          (end == r.size() || r[end] == ' ' || r[end] == '`')) {
        row = &r;
        break;
      }
    }
    ASSERT_NE(row, nullptr) << spec.flag << " has no row in docs/server.md";
    std::string shown = spec.format(defaults);
    if (spec.is_switch) shown = shown == "false" ? "off" : "on";
    if (shown.empty()) continue;
    // The default column is the second cell.
    const size_t a = row->find(" | ") + 3;
    const std::string default_cell = row->substr(a, row->find(" | ", a) - a);
    EXPECT_NE(default_cell.find(shown), std::string::npos)
        << spec.flag << ": default " << shown << " not in \"" << default_cell << "\"";
  }
}

}  // namespace
}  // namespace turbokv::server
