# Multi-node tests of the sharded C++ client against three (then four) real turbokv-server
# processes on loopback (skipped when the binary is missing; TURBOKV_SERVER_BIN overrides it).
# The Python counterpart is tests/python/test_cluster_integration.py (run by pytest).
if(TARGET turbokv_client AND TARGET turbokv_cli_lib)
  add_executable(cluster_integration_tests
      ${CMAKE_SOURCE_DIR}/tests/integration/cluster_test.cc)
  target_include_directories(cluster_integration_tests PRIVATE
      ${CMAKE_SOURCE_DIR}/tests/integration)
  target_compile_definitions(cluster_integration_tests PRIVATE
      TURBOKV_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
      TURBOKV_DEFAULT_SERVER_BIN="${CMAKE_BINARY_DIR}/bin/turbokv-server")
  target_link_libraries(cluster_integration_tests PRIVATE turbokv_cli_lib turbokv::client
                        GTest::gtest_main)
  if(TARGET turbokv-server)
    add_dependencies(cluster_integration_tests turbokv-server)
  endif()
  add_test(NAME cluster_integration_tests COMMAND cluster_integration_tests)
  set_tests_properties(cluster_integration_tests PROPERTIES LABELS integration TIMEOUT 300)
endif()
