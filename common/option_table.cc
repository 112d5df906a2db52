#include "common/option_table.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_format.h"

namespace turbokv {

std::string_view OptionUnitName(OptionUnit unit) {
  switch (unit) {
    case OptionUnit::kBytes:
      return "bytes";
    case OptionUnit::kMilliseconds:
      return "milliseconds";
    case OptionUnit::kSeconds:
      return "seconds";
    case OptionUnit::kFraction:
      return "fraction";
    case OptionUnit::kNone:
      break;
  }
  return "";
}

namespace option_internal {

std::string Describe(std::string_view field, std::string_view value, std::string_view flag) {
  std::string out = absl::StrCat(std::string(field), " ", std::string(value));
  if (!flag.empty()) absl::StrAppend(&out, " (", std::string(flag), ")");
  return out;
}

std::string Quoted(std::string_view text) { return absl::StrCat("\"", std::string(text), "\""); }

std::string FormatReal(double value) {
  // The fewest digits that read back as the same double: 0.995 prints "0.995", not
  // "0.99499999999999999556".
  for (int digits = 1; digits <= 17; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, value);
    double back = 0;
    if (absl::SimpleAtod(text, &back) && back == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

absl::Status CheckFileExists(std::string_view field, std::string_view flag, std::string_view path) {
  if (path.empty()) return absl::OkStatus();
  std::error_code ec;
  const auto status = std::filesystem::status(std::string(path), ec);
  if (ec || !std::filesystem::exists(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(field, Quoted(path), flag), ": no such file"));
  }
  if (std::filesystem::is_directory(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(field, Quoted(path), flag), " is a directory, not a file"));
  }
  return absl::OkStatus();
}

}  // namespace option_internal
}  // namespace turbokv
