#include "npy.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace turbokv::tools {
namespace {

// Value of 'key' in the header dict, e.g. "'descr': '<f2'" -> "'<f2'".
std::string DictValue(const std::string& header, const std::string& key) {
  const std::string k = "'" + key + "':";
  const size_t at = header.find(k);
  if (at == std::string::npos) return "";
  size_t i = at + k.size();
  while (i < header.size() && header[i] == ' ') ++i;
  const char open = header[i];
  const char close = open == '(' ? ')' : open == '\'' ? '\'' : ',';
  const size_t end = header.find(close, i + 1);
  if (end == std::string::npos) return "";
  return header.substr(i, end - i + (close == ',' ? 0 : 1));
}

}  // namespace

absl::StatusOr<NpyArray> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || std::memcmp(bytes.data(), "\x93NUMPY", 6) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a .npy file (bad magic)"));
  }
  const int major = bytes[6];
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = bytes[8] | (bytes[9] << 8);
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return absl::DataLossError(absl::StrCat(path, " is truncated"));
    header_len = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (static_cast<size_t>(bytes[11]) << 24);
    start = 12;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(path, ": .npy version ", major, " is not supported"));
  }
  if (bytes.size() < start + header_len) return absl::DataLossError(absl::StrCat(path, " is truncated"));
  const std::string header(bytes.begin() + start, bytes.begin() + start + header_len);
  NpyArray a;
  std::string descr = DictValue(header, "descr");
  if (descr.size() < 2) return absl::InvalidArgumentError(absl::StrCat(path, ": no descr in header"));
  a.descr = descr.substr(1, descr.size() - 2);
  if (a.descr != "<f2" && a.descr != "<f4" && a.descr != "<u2") {
    return absl::InvalidArgumentError(absl::StrCat(path, ": dtype ", a.descr,
                                                   " is not supported; expected <f2, <f4 or <u2 (bf16 bits)"));
  }
  if (DictValue(header, "fortran_order").rfind("True", 0) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": Fortran-order arrays are not supported"));
  }
  std::string shape = DictValue(header, "shape");
  if (shape.size() < 2) return absl::InvalidArgumentError(absl::StrCat(path, ": no shape in header"));
  shape = shape.substr(1, shape.size() - 2);
  size_t count = 1;
  for (absl::string_view part : absl::StrSplit(shape, ',', absl::SkipWhitespace())) {
    int64_t d = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(part), &d) || d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": bad shape (", shape, ")"));
    }
    a.shape.push_back(d);
    count *= static_cast<size_t>(d);
  }
  const size_t elem = a.descr == "<f4" ? 4 : 2;
  const size_t data_start = start + header_len;
  if (bytes.size() - data_start < count * elem) {
    return absl::DataLossError(absl::StrCat(path, " holds ", bytes.size() - data_start,
                                            " data bytes; its header needs ", count * elem));
  }
  a.data.assign(bytes.begin() + data_start, bytes.begin() + data_start + count * elem);
  return a;
}

}  // namespace turbokv::tools
