// libFuzzer entry point of the PutBlocks/GetBlocks sequence target (service_fuzz_target.h):
// clang -fsanitize=fuzzer,address,undefined with TURBOKV_BUILD_FUZZERS=ON and the service on.
//   build-fuzz-service/bin/service_fuzzer -detect_leaks=0 -max_total_time=600 \
//       -timeout=60 CORPUS_DIR tests/fuzz/service_corpus
// (leak detection off: the server keeps running between inputs.)
#include "service_fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  turbokv::server::fuzz::ServiceFuzzer::Get().Run(data, size);
  return 0;
}
