# Server integration tests: the real turbokv-server binary on 127.0.0.1:0, driven through the
# generated gRPC stub (no client library).
if(TARGET turbokv-server)
  include(GoogleTest)
  find_package(gRPC CONFIG REQUIRED)
  add_executable(server_integration_tests
    ${CMAKE_SOURCE_DIR}/tests/integration/server_rpc_test.cc)
  target_include_directories(server_integration_tests PRIVATE ${CMAKE_SOURCE_DIR}/tests/integration)
  target_compile_definitions(server_integration_tests PRIVATE
    TURBOKV_SERVER_BINARY="$<TARGET_FILE:turbokv-server>")
  target_link_libraries(server_integration_tests PRIVATE turbokv::proto gRPC::grpc++
                        GTest::gtest GTest::gtest_main)
  add_dependencies(server_integration_tests turbokv-server)
  gtest_discover_tests(server_integration_tests
    PROPERTIES LABELS integration TIMEOUT 120 DISCOVERY_TIMEOUT 30)
endif()

# Hostile and concurrent input (limits, stalled streams, budget, write order), same binary.
if(TARGET turbokv-server)
  add_executable(server_limits_tests ${CMAKE_SOURCE_DIR}/tests/integration/server_limits_test.cc)
  target_include_directories(server_limits_tests PRIVATE ${CMAKE_SOURCE_DIR}/tests/integration)
  target_compile_definitions(server_limits_tests PRIVATE
    TURBOKV_SERVER_BINARY="$<TARGET_FILE:turbokv-server>")
  target_link_libraries(server_limits_tests PRIVATE turbokv::proto gRPC::grpc++ GTest::gtest
                        GTest::gtest_main)
  add_dependencies(server_limits_tests turbokv-server)
  gtest_discover_tests(server_limits_tests
    PROPERTIES LABELS integration TIMEOUT 180 DISCOVERY_TIMEOUT 30)
endif()

# Reactor lifetimes: many clients cancelling streams while pool work is pending, same binary.
if(TARGET turbokv-server)
  add_executable(server_lifetime_tests
    ${CMAKE_SOURCE_DIR}/tests/integration/server_lifetime_test.cc)
  target_include_directories(server_lifetime_tests PRIVATE ${CMAKE_SOURCE_DIR}/tests/integration)
  target_compile_definitions(server_lifetime_tests PRIVATE
    TURBOKV_SERVER_BINARY="$<TARGET_FILE:turbokv-server>")
  target_link_libraries(server_lifetime_tests PRIVATE turbokv::proto gRPC::grpc++ GTest::gtest
                        GTest::gtest_main)
  add_dependencies(server_lifetime_tests turbokv-server)
  gtest_discover_tests(server_lifetime_tests
    PROPERTIES LABELS integration TIMEOUT 300 DISCOVERY_TIMEOUT 30)
endif()
