// Minimal NumPy .npy (format 1.0/2.0/3.0) reader for the codec tool: little-endian float16,
// bfloat16 (as '<u2' or '<V2' with the shape of the tensor), float32 arrays in C order.
#ifndef TURBOKV_TOOLS_CODEC_NPY_H_
#define TURBOKV_TOOLS_CODEC_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace turbokv::tools {

struct NpyArray {
  std::string descr;           // e.g. "<f2", "<f4", "<u2"
  std::vector<int64_t> shape;  // C order
  std::vector<uint8_t> data;   // raw little-endian elements
};

// InvalidArgument for anything but a C-order little-endian <f2/<f4/<u2 array; NotFound when
// the file cannot be opened; DataLoss when it is shorter than its header says.
absl::StatusOr<NpyArray> ReadNpy(const std::string& path);

}  // namespace turbokv::tools

#endif  // TURBOKV_TOOLS_CODEC_NPY_H_
