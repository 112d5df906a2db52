// The CLI's one-line JSON objects (`--json`) and their "key: value" form for people, on
// nlohmann-json (ordered_json: keys keep insertion order). Numbers: integers exactly, doubles
// rounded to 6 significant digits (non-finite -> null). Strings that are not valid UTF-8 get
// U+FFFD for the bad bytes instead of failing the dump.
#ifndef TURBOKV_CLIENT_CLI_JSON_WRITER_H_
#define TURBOKV_CLIENT_CLI_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace turbokv::cli {

class JsonObject {
 public:
  JsonObject& Add(absl::string_view key, absl::string_view value);
  JsonObject& Add(absl::string_view key, const char* value) {
    return Add(key, absl::string_view(value));
  }
  JsonObject& Add(absl::string_view key, const std::string& value) {
    return Add(key, absl::string_view(value));
  }
  JsonObject& Add(absl::string_view key, bool value);
  JsonObject& Add(absl::string_view key, int64_t value);
  JsonObject& Add(absl::string_view key, uint64_t value);
  JsonObject& Add(absl::string_view key, int value) { return Add(key, int64_t{value}); }
  JsonObject& Add(absl::string_view key, unsigned value) { return Add(key, uint64_t{value}); }
  JsonObject& Add(absl::string_view key, double value);
  JsonObject& Add(absl::string_view key, const JsonObject& value);
  // A nested object shown to people as `human` instead of its JSON.
  JsonObject& Add(absl::string_view key, const JsonObject& value, std::string human);
  // A JSON array of objects (shown to people as that array's JSON).
  JsonObject& AddArray(absl::string_view key, const std::vector<JsonObject>& values);

  // "{...}" on one line.
  std::string Dump() const;
  // "key: value" lines for people (strings unquoted, nested objects as JSON).
  std::string Human() const;

 private:
  JsonObject& Put(absl::string_view key, nlohmann::ordered_json value, std::string human);

  nlohmann::ordered_json json_ = nlohmann::ordered_json::object();
  std::vector<std::pair<std::string, std::string>> human_;  // (key, value as people read it)
};

}  // namespace turbokv::cli

#endif  // TURBOKV_CLIENT_CLI_JSON_WRITER_H_
