# GPU tests: CUDA codec against the CPU codec. Built only with the CUDA backend; each test
# skips (GTEST_SKIP) when no device is present.
if(TURBOKV_HAVE_CUDA)
  add_executable(codec_gpu_tests ${CMAKE_SOURCE_DIR}/tests/gpu/codec_gpu_test.cc)
  target_include_directories(codec_gpu_tests PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit)
  target_link_libraries(codec_gpu_tests PRIVATE turbokv::codec GTest::gtest GTest::gtest_main)
  include(GoogleTest)
  gtest_discover_tests(codec_gpu_tests PROPERTIES LABELS "gpu" DISCOVERY_TIMEOUT 60)
endif()
