// A table of options: for each field of an options struct, its flag, name, unit, allowed range
// and help, written once. From it come the struct's range checks (Validate), the command-line
// flags (server/main.cc turns each entry into a CLI11 option), the flag's default text and the
// option list that docs/server.md is checked against. The struct's inline initializers stay
// the one place a default is stated; the table reads it from a default-constructed struct.
//
// Like Kvrocks' table of config fields (each field with its default and range, driving both
// parsing and validation), but typed by member pointers on our option structs.
//
//   OptionTable<StorageOptions> t;
//   t.Bytes("--segment-bytes", "storage.segment_bytes", &StorageOptions::segment_bytes,
//           1 << 20, uint64_t{4} << 30, "Size at which a value-log segment is closed");
//   TURBOKV_RETURN_IF_ERROR(t.Validate(options));
//
// Thread safety: a built table is immutable; Validate/parse/format may run concurrently on
// different option structs.
#ifndef TURBOKV_COMMON_OPTION_TABLE_H_
#define TURBOKV_COMMON_OPTION_TABLE_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/byte_size.h"

namespace turbokv {

// What a number counts. Shown in --help; bytes also select the byte-size parser.
enum class OptionUnit { kNone, kBytes, kMilliseconds, kSeconds, kFraction };
// "", "bytes", "milliseconds", "seconds", "fraction".
std::string_view OptionUnitName(OptionUnit unit);

// One option, type-erased. `parse` and `format` are inverses for every valid value:
// parse(o, format(o)) leaves o unchanged.
template <typename Options>
struct OptionSpec {
  std::string flag;   // "--capacity"; empty: a field with no flag (tests set it directly)
  std::string field;  // "storage.capacity_bytes": the name errors use
  std::string help;   // one paragraph, no range or default (they are added from the table)
  OptionUnit unit = OptionUnit::kNone;
  std::string value_name;  // placeholder in --help: SIZE, N, MS, SECONDS, F, TEXT, "a|b|c"
  std::string range;       // "0..1024", ">= 1", "4KiB..1GiB", "(0, 1]", "one of a, b"; "": any
  bool is_switch = false;  // a flag without a value (a bool field): parse takes "true"/"false"
  // Sets the field from a flag's text and checks it: InvalidArgument naming the flag and the
  // field when the text does not parse or the value is outside the range.
  std::function<absl::Status(Options&, std::string_view)> parse;
  // The field as text that parse accepts (for a flag's default and for the docs).
  std::function<std::string(const Options&)> format;
  // InvalidArgument naming the field (and the flag) when the field is outside the range.
  std::function<absl::Status(const Options&)> check;
};

namespace option_internal {

// `field value (flag)`, e.g. `codec.threads 2000 (--codec-threads)`; without a flag
// `field value`. What every message of the table starts with.
std::string Describe(std::string_view field, std::string_view value, std::string_view flag);
std::string FormatReal(double value);       // the shortest text that parses back to `value`
std::string Quoted(std::string_view text);  // text in double quotes
// OK when `path` is empty or names an existing file (not a directory); InvalidArgument naming
// the field and flag otherwise.
absl::Status CheckFileExists(std::string_view field, std::string_view flag, std::string_view path);

template <typename T>
bool ParseNumber(std::string_view text, T* out) {
  if constexpr (std::is_floating_point_v<T>) {
    double d = 0;
    if (!absl::SimpleAtod(absl::string_view(text.data(), text.size()), &d)) return false;
    *out = static_cast<T>(d);
    return true;
  } else if constexpr (std::is_signed_v<T>) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &v) ||
        v < std::numeric_limits<T>::min() || v > std::numeric_limits<T>::max()) {
      return false;
    }
    *out = static_cast<T>(v);
    return true;
  } else {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &v) ||
        v > std::numeric_limits<T>::max())
      return false;
    *out = static_cast<T>(v);
    return true;
  }
}

}  // namespace option_internal

template <typename Options>
class OptionTable {
 public:
  using Spec = OptionSpec<Options>;

  // An integer or real field in [min, max] (`min_exclusive`: in (min, max]). Bytes go through
  // Bytes(), not here.
  template <typename T>
  OptionTable& Number(std::string flag, std::string field, T Options::*member, T min, T max,
                      OptionUnit unit, std::string help, bool min_exclusive = false) {
    static_assert(std::is_arithmetic_v<T> && !std::is_same_v<T, bool>);
    Spec s = Base(std::move(flag), std::move(field), std::move(help));
    s.unit = unit;
    s.value_name = unit == OptionUnit::kMilliseconds ? "MS"
                   : unit == OptionUnit::kSeconds    ? "SECONDS"
                   : std::is_floating_point_v<T>     ? "F"
                                                     : "N";
    s.range = RangeText(min, max, min_exclusive, [](T v) { return NumberText(v); });
    s.check = [member, min, max, min_exclusive, field = s.field, flag = s.flag,
               range = s.range](const Options& o) {
      const T v = o.*member;
      const bool low = min_exclusive ? !(v > min) : !(v >= min);  // NaN fails both
      if (low || !(v <= max)) {
        return absl::InvalidArgumentError(absl::StrCat(
            option_internal::Describe(field, NumberText(v), flag), " is outside ", range));
      }
      return absl::OkStatus();
    };
    s.format = [member](const Options& o) { return NumberText(o.*member); };
    s.parse = [member, field = s.field, flag = s.flag, range = s.range, check = s.check](
                  Options& o, std::string_view text) {
      T v{};
      if (!option_internal::ParseNumber(text, &v)) {
        return absl::InvalidArgumentError(absl::StrCat(
            option_internal::Describe(field, option_internal::Quoted(text), flag), " is not ",
            std::is_floating_point_v<T> ? "a number" : "an integer", " in ", range));
      }
      o.*member = v;
      return check(o);
    };
    specs_.push_back(std::move(s));
    return *this;
  }

  // A byte count in [min, max]; the flag takes ParseByteSize's spellings (10GiB, 512MiB, 100MB,
  // 4096).
  OptionTable& Bytes(std::string flag, std::string field, uint64_t Options::*member, uint64_t min,
                     uint64_t max, std::string help) {
    Spec s = Base(std::move(flag), std::move(field), std::move(help));
    s.unit = OptionUnit::kBytes;
    s.value_name = "SIZE";
    s.range = RangeText(min, max, false, [](uint64_t v) { return FormatByteSizeFlag(v); });
    s.check = [member, min, max, field = s.field, flag = s.flag,
               range = s.range](const Options& o) {
      const uint64_t v = o.*member;
      if (v < min || v > max) {
        return absl::InvalidArgumentError(absl::StrCat(
            option_internal::Describe(field, FormatByteSizeFlag(v), flag), " is outside ", range));
      }
      return absl::OkStatus();
    };
    s.format = [member](const Options& o) { return FormatByteSizeFlag(o.*member); };
    s.parse = [member, field = s.field, flag = s.flag, check = s.check](Options& o,
                                                                        std::string_view text) {
      absl::StatusOr<uint64_t> v = ParseByteSize(text);
      if (!v.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(option_internal::Describe(field, option_internal::Quoted(text), flag),
                         ": ", v.status().message()));
      }
      o.*member = *v;
      return check(o);
    };
    specs_.push_back(std::move(s));
    return *this;
  }

  // A text field; `choices` non-empty: it must be one of them. `value_name`: HOST:PORT, PATH...
  // Checks beyond membership (an address's syntax) belong to the struct's Validate.
  OptionTable& Text(std::string flag, std::string field, std::string Options::*member,
                    std::string value_name, std::vector<std::string> choices, std::string help) {
    Spec s = Base(std::move(flag), std::move(field), std::move(help));
    s.value_name = choices.empty() ? std::move(value_name) : absl::StrJoin(choices, "|");
    if (!choices.empty()) s.range = absl::StrCat("one of ", absl::StrJoin(choices, ", "));
    s.check = [member, choices, field = s.field, flag = s.flag](const Options& o) {
      const std::string& v = o.*member;
      if (choices.empty()) return absl::OkStatus();
      for (const std::string& c : choices) {
        if (c == v) return absl::OkStatus();
      }
      return absl::InvalidArgumentError(
          absl::StrCat(option_internal::Describe(field, option_internal::Quoted(v), flag),
                       " is not one of ", absl::StrJoin(choices, ", ")));
    };
    s.format = [member](const Options& o) { return o.*member; };
    s.parse = [member, check = s.check](Options& o, std::string_view text) {
      o.*member = std::string(text);
      return check(o);
    };
    specs_.push_back(std::move(s));
    return *this;
  }

  // A path to a file that must exist when given on the command line (checked when the flag is
  // parsed, not by Validate: tests build options without the files); "" = unset.
  OptionTable& File(std::string flag, std::string field, std::string Options::*member,
                    std::string help) {
    Text(std::move(flag), std::move(field), member, "FILE", {}, std::move(help));
    Spec& s = specs_.back();
    s.parse = [member, field = s.field, flag = s.flag](Options& o, std::string_view text) {
      if (absl::Status st = option_internal::CheckFileExists(field, flag, text); !st.ok()) {
        return st;
      }
      o.*member = std::string(text);
      return absl::OkStatus();
    };
    return *this;
  }

  // An enum field named by `names` (its text on the command line, in order of --help).
  template <typename E>
  OptionTable& Enum(std::string flag, std::string field, E Options::*member,
                    std::vector<std::pair<std::string, E>> names, std::string help) {
    Spec s = Base(std::move(flag), std::move(field), std::move(help));
    std::vector<std::string> texts;
    for (const auto& [text, value] : names) texts.push_back(text);
    s.value_name = absl::StrJoin(texts, "|");
    s.range = absl::StrCat("one of ", absl::StrJoin(texts, ", "));
    s.check = [member, names, field = s.field, flag = s.flag](const Options& o) {
      for (const auto& [text, value] : names) {
        if (value == o.*member) return absl::OkStatus();
      }
      return absl::InvalidArgumentError(absl::StrCat(
          option_internal::Describe(field, absl::StrCat(static_cast<int64_t>(o.*member)), flag),
          " is not a value of its enum"));
    };
    s.format = [member, names](const Options& o) {
      for (const auto& [text, value] : names) {
        if (value == o.*member) return text;
      }
      return std::string("?");
    };
    s.parse = [member, names, field = s.field, flag = s.flag, range = s.range](
                  Options& o, std::string_view text) {
      for (const auto& [t, value] : names) {
        if (t == text) {
          o.*member = value;
          return absl::OkStatus();
        }
      }
      return absl::InvalidArgumentError(
          absl::StrCat(option_internal::Describe(field, option_internal::Quoted(text), flag),
                       " is not ", range));
    };
    specs_.push_back(std::move(s));
    return *this;
  }

  // A bool field set by a flag without a value.
  OptionTable& Switch(std::string flag, std::string field, bool Options::*member,
                      std::string help) {
    Spec s = Base(std::move(flag), std::move(field), std::move(help));
    s.is_switch = true;
    s.check = [](const Options&) { return absl::OkStatus(); };
    s.format = [member](const Options& o) { return std::string(o.*member ? "true" : "false"); };
    s.parse = [member, field = s.field, flag = s.flag](Options& o, std::string_view text) {
      if (text == "true" || text == "1") {
        o.*member = true;
      } else if (text == "false" || text == "0") {
        o.*member = false;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(option_internal::Describe(field, option_internal::Quoted(text), flag),
                         " is not true, false, 1 or 0"));
      }
      return absl::OkStatus();
    };
    specs_.push_back(std::move(s));
    return *this;
  }

  // Adds every entry of `inner`, the table of the struct at `member` of Options (entries keep
  // their flags and field names).
  template <typename Inner>
  OptionTable& Include(Inner Options::*member, const OptionTable<Inner>& inner) {
    for (const OptionSpec<Inner>& in : inner.specs()) {
      Spec s;
      s.flag = in.flag;
      s.field = in.field;
      s.help = in.help;
      s.unit = in.unit;
      s.value_name = in.value_name;
      s.range = in.range;
      s.is_switch = in.is_switch;
      s.parse = [member, f = in.parse](Options& o, std::string_view t) { return f(o.*member, t); };
      s.format = [member, f = in.format](const Options& o) { return f(o.*member); };
      s.check = [member, f = in.check](const Options& o) { return f(o.*member); };
      specs_.push_back(std::move(s));
    }
    return *this;
  }

  // The first entry's range violation, in table order; OK when every field is in range.
  [[nodiscard]] absl::Status Validate(const Options& options) const {
    for (const Spec& s : specs_) {
      if (absl::Status st = s.check(options); !st.ok()) return st;
    }
    return absl::OkStatus();
  }

  const std::vector<Spec>& specs() const { return specs_; }
  // The entry of `flag`, or nullptr.
  const Spec* Find(std::string_view flag) const {
    for (const Spec& s : specs_) {
      if (s.flag == flag) return &s;
    }
    return nullptr;
  }

 private:
  static Spec Base(std::string flag, std::string field, std::string help) {
    Spec s;
    s.flag = std::move(flag);
    s.field = std::move(field);
    s.help = std::move(help);
    return s;
  }
  template <typename T>
  static std::string NumberText(T v) {
    if constexpr (std::is_floating_point_v<T>) {
      return option_internal::FormatReal(static_cast<double>(v));
    } else {
      return absl::StrCat(v);
    }
  }
  template <typename T, typename Fmt>
  static std::string RangeText(T min, T max, bool min_exclusive, Fmt fmt) {
    if (max == std::numeric_limits<T>::max()) {
      return absl::StrCat(min_exclusive ? "> " : ">= ", fmt(min));
    }
    if (min_exclusive) return absl::StrCat("(", fmt(min), ", ", fmt(max), "]");
    return absl::StrCat(fmt(min), "..", fmt(max));
  }

  std::vector<Spec> specs_;
};

// The --help text of an option: its help, then its unit (when SIZE or N do not say it) and
// range, e.g. "How long a call waits ... [milliseconds; >= 0]". Choices are in value_name.
template <typename Options>
std::string OptionHelp(const OptionSpec<Options>& spec) {
  std::vector<std::string> notes;
  if (spec.unit != OptionUnit::kNone && spec.unit != OptionUnit::kBytes) {
    notes.emplace_back(OptionUnitName(spec.unit));
  }
  if (!spec.range.empty() && spec.range.rfind("one of ", 0) != 0) notes.push_back(spec.range);
  if (notes.empty()) return spec.help;
  return absl::StrCat(spec.help, " [", absl::StrJoin(notes, "; "), "]");
}

}  // namespace turbokv

#endif  // TURBOKV_COMMON_OPTION_TABLE_H_
