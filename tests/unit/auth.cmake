# Unit tests of server/auth: the token file, hashed tokens, loopback peers, listen addresses.
include(GoogleTest)
if(TARGET turbokv_server_service)
  add_executable(server_auth_tests ${CMAKE_SOURCE_DIR}/tests/unit/server_auth_test.cc)
  target_link_libraries(server_auth_tests PRIVATE turbokv::server_service GTest::gtest
                        GTest::gtest_main)
  gtest_discover_tests(server_auth_tests PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)
endif()
