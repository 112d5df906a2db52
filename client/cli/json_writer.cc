#include "json_writer.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace turbokv::cli {
namespace {

std::string DumpJson(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

JsonObject& JsonObject::Put(absl::string_view key, nlohmann::ordered_json value,
                            std::string human) {
  json_[std::string(key)] = std::move(value);
  human_.emplace_back(std::string(key), std::move(human));
  return *this;
}

JsonObject& JsonObject::Add(absl::string_view key, absl::string_view value) {
  return Put(key, std::string(value), std::string(value));
}
JsonObject& JsonObject::Add(absl::string_view key, bool value) {
  return Put(key, value, value ? "true" : "false");
}
JsonObject& JsonObject::Add(absl::string_view key, int64_t value) {
  return Put(key, value, absl::StrCat(value));
}
JsonObject& JsonObject::Add(absl::string_view key, uint64_t value) {
  return Put(key, value, absl::StrCat(value));
}
JsonObject& JsonObject::Add(absl::string_view key, double value) {
  if (!std::isfinite(value)) return Put(key, nullptr, "null");
  const std::string six = absl::StrFormat("%.6g", value);
  return Put(key, std::strtod(six.c_str(), nullptr), six);
}
JsonObject& JsonObject::Add(absl::string_view key, const JsonObject& value) {
  return Put(key, value.json_, value.Dump());
}
JsonObject& JsonObject::Add(absl::string_view key, const JsonObject& value, std::string human) {
  return Put(key, value.json_, std::move(human));
}
JsonObject& JsonObject::AddArray(absl::string_view key, const std::vector<JsonObject>& values) {
  nlohmann::ordered_json array = nlohmann::ordered_json::array();
  for (const JsonObject& v : values) array.push_back(v.json_);
  std::string human = DumpJson(array);
  return Put(key, std::move(array), std::move(human));
}

std::string JsonObject::Dump() const { return DumpJson(json_); }

std::string JsonObject::Human() const {
  std::string out;
  for (const auto& [key, value] : human_) absl::StrAppend(&out, key, ": ", value, "\n");
  return out;
}

}  // namespace turbokv::cli
