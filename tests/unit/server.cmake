# Unit tests of the server: storage (value log, block store, index, repair), options, namespace
# registry.
include(GoogleTest)
if(TARGET turbokv_server_eviction)
  find_package(nlohmann_json 3 CONFIG REQUIRED)
  add_executable(eviction_unit_tests ${CMAKE_SOURCE_DIR}/tests/unit/storage_eviction_policy_test.cc)
  target_compile_definitions(eviction_unit_tests PRIVATE
                             TURBOKV_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  target_link_libraries(eviction_unit_tests PRIVATE turbokv::server_eviction
                        nlohmann_json::nlohmann_json GTest::gtest GTest::gtest_main)
  gtest_discover_tests(eviction_unit_tests PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)
endif()
if(TARGET turbokv_server_storage)
  find_package(RocksDB CONFIG REQUIRED)
  add_executable(storage_unit_tests
    ${CMAKE_SOURCE_DIR}/tests/unit/storage_block_events_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/storage_block_index_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/storage_block_store_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/storage_crc32c_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/storage_maintenance_task_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/storage_meta_scan_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/storage_repair_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/storage_tenants_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/storage_value_log_test.cc)
  target_link_libraries(storage_unit_tests PRIVATE turbokv::server_storage turbokv::rocksdb
                        PkgConfig::XXHASH GTest::gtest GTest::gtest_main)
  gtest_discover_tests(storage_unit_tests PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)
endif()
if(TARGET turbokv_server_service)
  add_executable(server_unit_tests
    ${CMAKE_SOURCE_DIR}/tests/unit/server_admission_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/server_budget_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/server_chunk_assembler_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/server_codec_backend_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/server_options_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/server_pipeline_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/server_namespace_registry_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/server_wire_format_test.cc)
  target_link_libraries(server_unit_tests PRIVATE turbokv::server_service GTest::gtest
                        GTest::gtest_main)
  gtest_discover_tests(server_unit_tests PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)

  # The command line made from the option table, checked against docs/server.md.
  add_executable(server_flags_tests ${CMAKE_SOURCE_DIR}/tests/unit/server_flags_test.cc)
  target_compile_definitions(server_flags_tests PRIVATE TURBOKV_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  target_link_libraries(server_flags_tests PRIVATE turbokv::server_flags GTest::gtest
                        GTest::gtest_main)
  gtest_discover_tests(server_flags_tests PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)
endif()
