# Unit tests of the client (turbokv::client and the CLI's internals). No server needed.
if(TARGET turbokv_client AND TARGET turbokv_cli_lib)
  add_executable(client_unit_tests
      ${CMAKE_SOURCE_DIR}/tests/unit/client_prefix_hasher_test.cc
      ${CMAKE_SOURCE_DIR}/tests/unit/client_chunking_test.cc
      ${CMAKE_SOURCE_DIR}/tests/unit/client_wire_format_test.cc
      ${CMAKE_SOURCE_DIR}/tests/unit/client_fake_server_test.cc
      ${CMAKE_SOURCE_DIR}/tests/unit/client_npy_test.cc
      ${CMAKE_SOURCE_DIR}/tests/unit/client_kv_layout_test.cc
      ${CMAKE_SOURCE_DIR}/tests/unit/client_text_table_test.cc)
  # chunking.h is internal to the client library: the test reaches it through the src folder.
  target_include_directories(client_unit_tests PRIVATE ${CMAKE_SOURCE_DIR}/client/src)
  target_compile_definitions(client_unit_tests PRIVATE
      TURBOKV_HASH_VECTORS="${CMAKE_SOURCE_DIR}/client/python/turbokv/hash_vectors.json"
      TURBOKV_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
  target_link_libraries(client_unit_tests PRIVATE turbokv_cli_lib turbokv::client turbokv::proto
                        GTest::gtest_main)
  add_test(NAME client_unit_tests COMMAND client_unit_tests)
  set_tests_properties(client_unit_tests PROPERTIES LABELS unit)
endif()
