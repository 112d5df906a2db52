// Byte sizes as people write them in flags, the token file and logs: one parser and one
// formatter for the server and the CLI. No dependency beyond Abseil.
#ifndef TURBOKV_COMMON_BYTE_SIZE_H_
#define TURBOKV_COMMON_BYTE_SIZE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace turbokv {

// "10GiB", "512MiB", "1.5TiB", "100MB" (decimal), "4096" (bytes), "10 gib". Units: B, KiB, MiB,
// GiB, TiB (binary), KB, MB, GB, TB (decimal), K/M/G/T alone binary; case-insensitive, spaces
// allowed around the unit; a fraction is rounded to the nearest byte. InvalidArgument quoting
// `text` when it is not a number with one of these units, or is 2^64 bytes or more.
[[nodiscard]] absl::StatusOr<uint64_t> ParseByteSize(std::string_view text);

// For people (logs, the CLI's tables): 512 -> "512 B", 1536 -> "1.5 KiB",
// 10737418240 -> "10 GiB", 2^64 - 1 -> "16 EiB" (binary units, 4 significant digits).
std::string FormatByteSize(uint64_t bytes);

// For flags: exact and parsed back by ParseByteSize: 10737418240 -> "10GiB", 1536 -> "1536".
std::string FormatByteSizeFlag(uint64_t bytes);

}  // namespace turbokv

#endif  // TURBOKV_COMMON_BYTE_SIZE_H_
