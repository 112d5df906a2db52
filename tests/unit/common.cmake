# Unit tests of common/ (byte sizes, the option table, the periodic-task service).
include(GoogleTest)
if(TARGET turbokv_common)
  add_executable(common_unit_tests
    ${CMAKE_SOURCE_DIR}/tests/unit/common_byte_size_test.cc
    ${CMAKE_SOURCE_DIR}/tests/unit/common_option_table_test.cc)
  target_link_libraries(common_unit_tests PRIVATE turbokv::common GTest::gtest GTest::gtest_main)
  gtest_discover_tests(common_unit_tests PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)
endif()

# The periodic-task service (common/periodic_tasks.h): a manual clock, no sleeps.
if(TARGET turbokv_periodic_tasks)
  add_executable(common_periodic_tasks_tests
    ${CMAKE_SOURCE_DIR}/tests/unit/common_periodic_tasks_test.cc)
  target_link_libraries(common_periodic_tasks_tests PRIVATE turbokv::periodic_tasks GTest::gtest
                        GTest::gtest_main)
  gtest_discover_tests(common_periodic_tasks_tests PROPERTIES LABELS unit DISCOVERY_TIMEOUT 30)
endif()
