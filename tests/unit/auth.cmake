# Unit tests of server/auth: the token file, hashed tokens, loopback peers, the auth options.
# They link the auth library alone: auth depends on no other part of the server.
include(GoogleTest)
if(TARGET turbokv_server_auth)
  add_executable(server_auth_tests ${CMAKE_SOURCE_DIR}/tests/unit/server_auth_test.cc)
  target_link_libraries(server_auth_tests PRIVATE turbokv::server_auth GTest::gtest
                        GTest::gtest_main)
  gtest_discover_tests(server_auth_tests PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)
endif()
