# Unit tests of the KV-event publisher (server/events): the wire format and a real ZMQ
# subscriber on 127.0.0.1.
include(GoogleTest)
if(TARGET turbokv_server_events)
  find_package(cppzmq CONFIG REQUIRED)
  find_package(msgpack CONFIG REQUIRED)
  add_executable(events_unit_tests ${CMAKE_SOURCE_DIR}/tests/unit/events_kv_event_publisher_test.cc)
  target_link_libraries(events_unit_tests PRIVATE turbokv::server_events cppzmq msgpackc
                        absl::strings GTest::gtest GTest::gtest_main)
  gtest_discover_tests(events_unit_tests PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)
endif()
