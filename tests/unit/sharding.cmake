# Unit tests of the client's placement (rendezvous hashing, endpoint specs). No server needed.
if(TARGET turbokv_client)
  add_executable(client_sharding_tests ${CMAKE_SOURCE_DIR}/tests/unit/client_sharding_test.cc)
  target_compile_definitions(client_sharding_tests PRIVATE
      TURBOKV_RENDEZVOUS_VECTORS="${CMAKE_SOURCE_DIR}/client/python/turbokv/rendezvous_vectors.json")
  target_link_libraries(client_sharding_tests PRIVATE turbokv::client turbokv::proto
                        GTest::gtest_main)
  add_test(NAME client_sharding_tests COMMAND client_sharding_tests)
  set_tests_properties(client_sharding_tests PROPERTIES LABELS unit)
endif()
