# The fault suite (issue 10): the real turbokv-server binary and C++ client under crashes,
# damaged files, a full disk and overload. Short mode in CI; TURBOKV_FAULT_MODE=long for the
# long mode (docs/faults.md). Skipped when the server binary is missing.
if(TARGET turbokv_client AND TARGET turbokv-server)
  find_package(RocksDB CONFIG REQUIRED)
  file(GLOB _fault_sources ${CMAKE_SOURCE_DIR}/tests/fault/*_test.cc)
  add_executable(fault_suite ${_fault_sources})
  target_include_directories(fault_suite PRIVATE ${CMAKE_SOURCE_DIR}/tests/fault
                             ${CMAKE_SOURCE_DIR}/tests/integration)
  target_compile_definitions(fault_suite PRIVATE
      TURBOKV_DEFAULT_SERVER_BIN="$<TARGET_FILE:turbokv-server>")
  target_link_libraries(fault_suite PRIVATE turbokv::client turbokv::codec turbokv::rocksdb
                        PkgConfig::XXHASH GTest::gtest GTest::gtest_main)
  add_dependencies(fault_suite turbokv-server)
  include(GoogleTest)
  gtest_discover_tests(fault_suite PROPERTIES LABELS "integration;fault" TIMEOUT 600
                       DISCOVERY_TIMEOUT 30)
endif()
