# Packed-block parser: a deterministic replay test in every build, and (TURBOKV_BUILD_FUZZERS,
# clang) a libFuzzer binary.
add_executable(codec_fuzz_replay_test ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_replay_test.cc)
target_include_directories(codec_fuzz_replay_test PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit
                           ${CMAKE_SOURCE_DIR}/tests/fuzz)
target_link_libraries(codec_fuzz_replay_test PRIVATE turbokv::codec PkgConfig::XXHASH
                      GTest::gtest GTest::gtest_main)
include(GoogleTest)
gtest_discover_tests(codec_fuzz_replay_test PROPERTIES LABELS "unit;codec;fuzz" DISCOVERY_TIMEOUT 60)

if(TURBOKV_BUILD_FUZZERS)
  add_executable(packed_block_fuzzer ${CMAKE_SOURCE_DIR}/tests/fuzz/packed_block_fuzzer.cc)
  target_compile_options(packed_block_fuzzer PRIVATE -fsanitize=fuzzer)
  target_link_options(packed_block_fuzzer PRIVATE -fsanitize=fuzzer)
  target_link_libraries(packed_block_fuzzer PRIVATE turbokv::codec)
endif()
