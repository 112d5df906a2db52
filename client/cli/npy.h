// A small reader/writer for NumPy .npy files (format versions 1.0, 2.0 and 3.0), enough for
// the CLI's KV and token files. Debian 12 packages no C++ .npy library (cnpy, xtensor-io are not
// in bookworm), hence this ~300-line implementation; it is strict rather than complete:
//   * C order only (fortran_order True is rejected);
//   * little-endian ('<') or byte-order-free ('|') element types only;
//   * element types: <f2 <f4 <f8 <u2 <i4 <i8 |u1 (others rejected by name);
//   * the data must be exactly prod(shape) * itemsize bytes (truncated or trailing bytes are
//     rejected).
// Format reference: numpy/lib/format.py ("NEP 1").
#ifndef TURBOKV_CLIENT_CLI_NPY_H_
#define TURBOKV_CLIENT_CLI_NPY_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace turbokv::cli {

struct NpyArray {
  std::string descr;            // "<f2", "<f4", "<f8", "<u2", "<i4", "<i8", "|u1"
  std::vector<uint64_t> shape;  // C order; empty = scalar
  std::string data;             // prod(shape) * itemsize bytes, little-endian

  // Bytes per element of `descr` (0 for an unsupported descr).
  size_t itemsize() const;
  // prod(shape) (1 for a scalar).
  uint64_t num_elements() const;
};

// Bytes per element of a supported descr; InvalidArgument naming the supported ones otherwise.
[[nodiscard]] absl::StatusOr<size_t> NpyItemSize(absl::string_view descr);

// Parses a whole .npy file. InvalidArgument (bad magic, version, header, dtype, order, size)
// with a message saying what was found and what is supported.
[[nodiscard]] absl::StatusOr<NpyArray> ParseNpy(absl::string_view file_bytes);
// Reads and parses `path`. NotFound / PermissionDenied / Unavailable for I/O failures.
[[nodiscard]] absl::StatusOr<NpyArray> ReadNpy(const std::string& path);

// Serializes as format 1.0 (2.0 when the header would exceed 65535 bytes). InvalidArgument
// when descr is unsupported or data does not match the shape.
[[nodiscard]] absl::StatusOr<std::string> SerializeNpy(const NpyArray& array);
[[nodiscard]] absl::Status WriteNpy(const std::string& path, const NpyArray& array);

}  // namespace turbokv::cli

#endif  // TURBOKV_CLIENT_CLI_NPY_H_
