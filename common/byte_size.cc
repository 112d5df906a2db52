#include "common/byte_size.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace turbokv {

absl::StatusOr<uint64_t> ParseByteSize(std::string_view text) {
  std::string s(absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size())));
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string number = s.substr(0, i);
  const std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(i)));
  auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("byte size \"", std::string(text),
                     "\" is not a number with an optional unit (B, KiB, MiB, GiB, TiB, "
                     "KB, MB, GB, TB), e.g. 10GiB"));
  };
  if (number.empty() || std::count(number.begin(), number.end(), '.') > 1) return bad();
  double multiplier = 0;
  if (unit.empty() || unit == "b") {
    multiplier = 1;
  } else if (unit == "k" || unit == "kib") {
    multiplier = 0x1p10;
  } else if (unit == "m" || unit == "mib") {
    multiplier = 0x1p20;
  } else if (unit == "g" || unit == "gib") {
    multiplier = 0x1p30;
  } else if (unit == "t" || unit == "tib") {
    multiplier = 0x1p40;
  } else if (unit == "kb") {
    multiplier = 1e3;
  } else if (unit == "mb") {
    multiplier = 1e6;
  } else if (unit == "gb") {
    multiplier = 1e9;
  } else if (unit == "tb") {
    multiplier = 1e12;
  } else {
    return bad();
  }
  const double value = std::strtod(number.c_str(), nullptr) * multiplier;
  if (!std::isfinite(value) || value < 0) return bad();
  if (value >= 0x1p64) {  // the cast below would overflow: uint64_t ends at 2^64 - 1
    return absl::InvalidArgumentError(absl::StrCat(
        "byte size \"", std::string(text), "\" is too large: at most 2^64 - 1 bytes (16 EiB)"));
  }
  return static_cast<uint64_t>(std::round(value));
}

std::string FormatByteSize(uint64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024;
  size_t unit = 0;
  // Past 1023.95 the 4 significant digits would print "1024": take the next unit instead.
  while (v >= 1023.95 && unit + 1 < std::size(kUnits)) {
    v /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.4g %s", v, kUnits[unit]);
}

std::string FormatByteSizeFlag(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  while (unit + 1 < std::size(kUnits) && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrCat(bytes, kUnits[unit]);
}

}  // namespace turbokv
