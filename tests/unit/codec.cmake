# Codec unit tests (turbokv::codec).
add_executable(codec_unit_tests
  ${CMAKE_SOURCE_DIR}/tests/unit/codec_codebook_test.cc
  ${CMAKE_SOURCE_DIR}/tests/unit/codec_rotation_test.cc
  ${CMAKE_SOURCE_DIR}/tests/unit/codec_float16_test.cc
  ${CMAKE_SOURCE_DIR}/tests/unit/codec_block_test.cc
  ${CMAKE_SOURCE_DIR}/tests/unit/codec_format_test.cc
  ${CMAKE_SOURCE_DIR}/tests/unit/codec_isa_test.cc
  ${CMAKE_SOURCE_DIR}/tests/unit/codec_real_kv_test.cc
  ${CMAKE_SOURCE_DIR}/tests/unit/codec_validate_test.cc
  ${CMAKE_SOURCE_DIR}/tests/unit/codec_wide_scale_test.cc
)
target_link_libraries(codec_unit_tests PRIVATE turbokv::codec turbokv_npy GTest::gtest
                      GTest::gtest_main absl::strings PkgConfig::XXHASH)
target_compile_definitions(codec_unit_tests PRIVATE
  TURBOKV_FIXTURES_DIR="${CMAKE_SOURCE_DIR}/tests/fixtures")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  # For the F16C cross-check of the software fp16 conversion (run only after a CPU check).
  set_source_files_properties(${CMAKE_SOURCE_DIR}/tests/unit/codec_float16_test.cc
                              PROPERTIES COMPILE_OPTIONS "-mf16c")
endif()
include(GoogleTest)
gtest_discover_tests(codec_unit_tests PROPERTIES LABELS "unit;codec" DISCOVERY_TIMEOUT 60)

# The CUDA kernels' per-warp code on a 32-lane emulator against the CPU codec (no GPU needed).
# Not in the ASan run of tools/test.sh: ASan does not follow ucontext fiber switches.
add_executable(codec_warp_tests ${CMAKE_SOURCE_DIR}/tests/unit/codec_warp_test.cc)
target_include_directories(codec_warp_tests PRIVATE ${CMAKE_SOURCE_DIR}/kernels/src)
target_link_libraries(codec_warp_tests PRIVATE turbokv::codec GTest::gtest GTest::gtest_main)
gtest_discover_tests(codec_warp_tests PROPERTIES LABELS "unit;codec" DISCOVERY_TIMEOUT 60)
