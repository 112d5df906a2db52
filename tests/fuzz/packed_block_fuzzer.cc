// libFuzzer entry point: clang -fsanitize=fuzzer,address (TURBOKV_BUILD_FUZZERS=ON).
//   build-fuzz/bin/packed_block_fuzzer -max_total_time=60 tests/fuzz/corpus
#include "packed_block_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  turbokv::codec::fuzz::FuzzPackedBlock(data, size);
  return 0;
}
