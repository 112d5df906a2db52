// A minimal writer for the CLI's one-line JSON objects (`--json`). Keys keep insertion order.
// Numbers: integers exactly, doubles with up to 6 significant digits (non-finite -> null).
#ifndef TURBOKV_CLIENT_CLI_JSON_WRITER_H_
#define TURBOKV_CLIENT_CLI_JSON_WRITER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

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
  // A JSON array of already-serialized values.
  JsonObject& AddRawArray(absl::string_view key, const std::vector<std::string>& values);

  // "{...}" on one line.
  std::string Dump() const;
  // "key: value" lines for people (strings unquoted, nested objects as JSON).
  std::string Human() const;

 private:
  struct Field {
    std::string key;
    std::string json;   // serialized JSON value
    std::string human;  // the value as a person reads it
  };
  std::vector<Field> fields_;
};

// A JSON string literal with escapes.
std::string JsonQuote(absl::string_view s);

}  // namespace turbokv::cli

#endif  // TURBOKV_CLIENT_CLI_JSON_WRITER_H_
