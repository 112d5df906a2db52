#include "npy.h"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace turbokv::cli {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr char kSupported[] = "<f2, <f4, <f8, <u2, <i4, <i8, |u1";

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("invalid .npy file: ", what));
}

// Parser for the header, a Python dict literal such as
//   {'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }
// Only the constructs numpy writes are accepted.
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : s_(text) {}

  absl::Status Parse(std::string* descr, bool* fortran, std::vector<uint64_t>* shape) {
    bool have_descr = false, have_order = false, have_shape = false;
    SkipWs();
    if (!Eat('{')) return Bad("header is not a dict");
    while (true) {
      SkipWs();
      if (Eat('}')) break;
      std::string key;
      if (!String(&key)) return Bad(absl::StrCat("expected a quoted key at ", Rest()));
      SkipWs();
      if (!Eat(':')) return Bad(absl::StrCat("expected ':' after key '", key, "'"));
      SkipWs();
      if (key == "descr") {
        if (!String(descr)) return Bad("'descr' is not a string (structured dtypes unsupported)");
        have_descr = true;
      } else if (key == "fortran_order") {
        if (Word("True")) {
          *fortran = true;
        } else if (Word("False")) {
          *fortran = false;
        } else {
          return Bad("'fortran_order' is not True or False");
        }
        have_order = true;
      } else if (key == "shape") {
        if (!Tuple(shape)) return Bad("'shape' is not a tuple of non-negative integers");
        have_shape = true;
      } else {
        return Bad(absl::StrCat("unexpected header key '", key, "'"));
      }
      SkipWs();
      if (Eat(',')) continue;
      SkipWs();
      if (Eat('}')) break;
      return Bad(absl::StrCat("expected ',' or '}' at ", Rest()));
    }
    if (!have_descr || !have_order || !have_shape) {
      return Bad("header lacks one of 'descr', 'fortran_order', 'shape'");
    }
    return absl::OkStatus();
  }

 private:
  void SkipWs() {
    while (i_ < s_.size() && absl::ascii_isspace(s_[i_])) ++i_;
  }
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool Word(absl::string_view w) {
    if (s_.substr(i_, w.size()) == w) {
      i_ += w.size();
      return true;
    }
    return false;
  }
  bool String(std::string* out) {
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return false;
    const char q = s_[i_++];
    const size_t end = s_.find(q, i_);
    if (end == absl::string_view::npos) return false;
    *out = std::string(s_.substr(i_, end - i_));
    i_ = end + 1;
    return true;
  }
  bool Tuple(std::vector<uint64_t>* out) {
    out->clear();
    if (!Eat('(')) return false;
    while (true) {
      SkipWs();
      if (Eat(')')) return true;
      size_t j = i_;
      while (j < s_.size() && absl::ascii_isdigit(s_[j])) ++j;
      uint64_t v = 0;
      if (j == i_ || !absl::SimpleAtoi(s_.substr(i_, j - i_), &v)) return false;
      out->push_back(v);
      i_ = j;
      SkipWs();
      if (Eat(',')) continue;
      SkipWs();
      if (Eat(')')) return true;
      return false;
    }
  }
  std::string Rest() const { return absl::StrCat("'", s_.substr(i_, 20), "'"); }

  absl::string_view s_;
  size_t i_ = 0;
};

}  // namespace

absl::StatusOr<size_t> NpyItemSize(absl::string_view descr) {
  if (descr == "<f2" || descr == "<u2") return 2;
  if (descr == "<f4" || descr == "<i4") return 4;
  if (descr == "<f8" || descr == "<i8") return 8;
  if (descr == "|u1") return 1;
  if (!descr.empty() && descr[0] == '>') {
    return absl::InvalidArgumentError(
        absl::StrCat("big-endian dtype '", descr,
                     "' is not supported; save with arr.astype(arr.dtype."
                     "newbyteorder('<')). Supported: ",
                     kSupported));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unsupported .npy dtype '", descr, "'; supported: ", kSupported));
}

size_t NpyArray::itemsize() const {
  absl::StatusOr<size_t> s = NpyItemSize(descr);
  return s.ok() ? *s : 0;
}

uint64_t NpyArray::num_elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<NpyArray> ParseNpy(absl::string_view file) {
  if (file.size() < kMagicLen + 2 ||
      file.substr(0, kMagicLen) != absl::string_view(kMagic, kMagicLen)) {
    return Bad("missing the \\x93NUMPY magic");
  }
  const uint8_t major = static_cast<uint8_t>(file[6]);
  const uint8_t minor = static_cast<uint8_t>(file[7]);
  size_t header_len = 0, prefix = 0;
  if (major == 1) {
    if (file.size() < 10) return Bad("truncated before the header length");
    header_len =
        static_cast<uint8_t>(file[8]) | (static_cast<size_t>(static_cast<uint8_t>(file[9])) << 8);
    prefix = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12) return Bad("truncated before the header length");
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<size_t>(static_cast<uint8_t>(file[8 + i])) << (8 * i);
    }
    prefix = 12;
  } else {
    return Bad(absl::StrCat("format version ", major, ".", minor, " is not 1.x, 2.x or 3.x"));
  }
  if (file.size() < prefix + header_len) return Bad("truncated inside the header");
  const absl::string_view header = file.substr(prefix, header_len);
  NpyArray out;
  bool fortran = false;
  HeaderParser parser(header);
  if (absl::Status st = parser.Parse(&out.descr, &fortran, &out.shape); !st.ok()) return st;
  if (fortran) {
    return absl::InvalidArgumentError(
        "Fortran-order .npy arrays are not supported; save np.ascontiguousarray(arr)");
  }
  absl::StatusOr<size_t> itemsize = NpyItemSize(out.descr);
  if (!itemsize.ok()) return itemsize.status();
  const absl::string_view data = file.substr(prefix + header_len);
  // prod(shape) * itemsize, refusing shapes whose size overflows 64 bits.
  uint64_t expect = *itemsize;
  bool overflow = false;
  for (uint64_t d : out.shape) overflow = __builtin_mul_overflow(expect, d, &expect) || overflow;
  for (uint64_t d : out.shape) overflow = overflow && d != 0;
  if (overflow) {
    return Bad(absl::StrCat("shape (", absl::StrJoin(out.shape, ", "), ") needs more than the ",
                            data.size(), " data bytes present"));
  }
  if (expect != data.size()) {
    return Bad(absl::StrCat("shape (", absl::StrJoin(out.shape, ", "), ") of ", out.descr,
                            " needs ", expect, " data bytes, file has ", data.size()));
  }
  out.data = std::string(data);
  return out;
}

absl::StatusOr<NpyArray> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::UnavailableError(absl::StrCat("error reading ", path));
  absl::StatusOr<NpyArray> arr = ParseNpy(ss.str());
  if (!arr.ok()) {
    return absl::Status(arr.status().code(), absl::StrCat(path, ": ", arr.status().message()));
  }
  return arr;
}

absl::StatusOr<std::string> SerializeNpy(const NpyArray& array) {
  absl::StatusOr<size_t> itemsize = NpyItemSize(array.descr);
  if (!itemsize.ok()) return itemsize.status();
  if (array.num_elements() * *itemsize != array.data.size()) {
    return absl::InvalidArgumentError(absl::StrCat("npy data has ", array.data.size(),
                                                   " bytes, shape needs ",
                                                   array.num_elements() * *itemsize));
  }
  std::string shape = absl::StrJoin(array.shape, ", ");
  if (array.shape.size() == 1) shape += ",";
  std::string dict = absl::StrCat("{'descr': '", array.descr,
                                  "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Pad with spaces and a newline so that the data starts on a 64-byte boundary.
  const bool v2 = dict.size() + 11 + 64 > 65535;
  const size_t prefix = v2 ? 12 : 10;
  const size_t total = ((prefix + dict.size() + 1 + 63) / 64) * 64;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  std::string out(kMagic, kMagicLen);
  out.push_back(static_cast<char>(v2 ? 2 : 1));
  out.push_back(0);
  const size_t hl = dict.size();
  out.push_back(static_cast<char>(hl & 0xff));
  out.push_back(static_cast<char>((hl >> 8) & 0xff));
  if (v2) {
    out.push_back(static_cast<char>((hl >> 16) & 0xff));
    out.push_back(static_cast<char>((hl >> 24) & 0xff));
  }
  out += dict;
  out += array.data;
  return out;
}

absl::Status WriteNpy(const std::string& path, const NpyArray& array) {
  absl::StatusOr<std::string> bytes = SerializeNpy(array);
  if (!bytes.ok()) return bytes.status();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    // A local error, coded by errno (a missing directory is NOT_FOUND, not PERMISSION_DENIED).
    const int err = errno;
    std::string msg = absl::StrCat("cannot write ", path);
    if (err == ENOENT) {
      const std::string dir = std::filesystem::path(path).parent_path().string();
      absl::StrAppend(&msg, " (directory ", dir.empty() ? "." : dir, " does not exist)");
    }
    return absl::ErrnoToStatus(err, msg);
  }
  out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

}  // namespace turbokv::cli
