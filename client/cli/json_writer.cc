#include "json_writer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace turbokv::cli {

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

JsonObject& JsonObject::Add(absl::string_view key, absl::string_view value) {
  fields_.push_back({std::string(key), JsonQuote(value), std::string(value)});
  return *this;
}
JsonObject& JsonObject::Add(absl::string_view key, bool value) {
  fields_.push_back({std::string(key), value ? "true" : "false", value ? "true" : "false"});
  return *this;
}
JsonObject& JsonObject::Add(absl::string_view key, int64_t value) {
  fields_.push_back({std::string(key), absl::StrCat(value), absl::StrCat(value)});
  return *this;
}
JsonObject& JsonObject::Add(absl::string_view key, uint64_t value) {
  fields_.push_back({std::string(key), absl::StrCat(value), absl::StrCat(value)});
  return *this;
}
JsonObject& JsonObject::Add(absl::string_view key, double value) {
  std::string v = std::isfinite(value) ? absl::StrFormat("%.6g", value) : "null";
  fields_.push_back({std::string(key), v, v});
  return *this;
}
JsonObject& JsonObject::Add(absl::string_view key, const JsonObject& value) {
  fields_.push_back({std::string(key), value.Dump(), value.Dump()});
  return *this;
}
JsonObject& JsonObject::Add(absl::string_view key, const JsonObject& value, std::string human) {
  fields_.push_back({std::string(key), value.Dump(), std::move(human)});
  return *this;
}
JsonObject& JsonObject::AddRawArray(absl::string_view key, const std::vector<std::string>& values) {
  std::string v = absl::StrCat("[", absl::StrJoin(values, ","), "]");
  fields_.push_back({std::string(key), v, v});
  return *this;
}

std::string JsonObject::Dump() const {
  std::string out = "{";
  for (size_t i = 0; i < fields_.size(); ++i) {
    if (i) out += ",";
    absl::StrAppend(&out, JsonQuote(fields_[i].key), ":", fields_[i].json);
  }
  out += "}";
  return out;
}

std::string JsonObject::Human() const {
  std::string out;
  for (const Field& f : fields_) absl::StrAppend(&out, f.key, ": ", f.human, "\n");
  return out;
}

}  // namespace turbokv::cli
