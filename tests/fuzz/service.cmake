# PutBlocks/GetBlocks request sequences against an in-process server (issue 10): a replay test
# of the seed corpus in every service build, and (TURBOKV_BUILD_FUZZERS, clang) a libFuzzer
# binary. Both link the server's libraries, so neither exists with TURBOKV_BUILD_SERVICE=OFF.
if(TARGET turbokv::server_service)
  add_executable(service_fuzz_replay_test ${CMAKE_SOURCE_DIR}/tests/fuzz/service_fuzz_replay_test.cc)
  target_include_directories(service_fuzz_replay_test PRIVATE ${CMAKE_SOURCE_DIR}/tests/fuzz)
  target_compile_definitions(service_fuzz_replay_test PRIVATE
      TURBOKV_SERVICE_CORPUS="${CMAKE_SOURCE_DIR}/tests/fuzz/service_corpus")
  target_link_libraries(service_fuzz_replay_test PRIVATE turbokv::server_service GTest::gtest
                        GTest::gtest_main)
  include(GoogleTest)
  gtest_discover_tests(service_fuzz_replay_test PROPERTIES LABELS "integration;fuzz" TIMEOUT 300
                       DISCOVERY_TIMEOUT 60)

  if(TURBOKV_BUILD_FUZZERS)
    add_executable(service_fuzzer ${CMAKE_SOURCE_DIR}/tests/fuzz/service_fuzzer.cc)
    target_include_directories(service_fuzzer PRIVATE ${CMAKE_SOURCE_DIR}/tests/fuzz)
    target_compile_options(service_fuzzer PRIVATE -fsanitize=fuzzer)
    target_link_options(service_fuzzer PRIVATE -fsanitize=fuzzer)
    target_link_libraries(service_fuzzer PRIVATE turbokv::server_service)
  endif()
endif()
