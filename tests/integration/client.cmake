# Integration tests of the C++ client against the real turbokv-server binary (skipped when the
# binary is missing; set TURBOKV_SERVER_BIN to use one from another build folder).
if(TARGET turbokv_client AND TARGET turbokv_cli_lib)
  add_executable(client_integration_tests
      ${CMAKE_SOURCE_DIR}/tests/integration/client_server_test.cc)
  target_include_directories(client_integration_tests PRIVATE
      ${CMAKE_SOURCE_DIR}/tests/integration)
  target_compile_definitions(client_integration_tests PRIVATE
      TURBOKV_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
      TURBOKV_DEFAULT_SERVER_BIN="${CMAKE_BINARY_DIR}/bin/turbokv-server")
  target_link_libraries(client_integration_tests PRIVATE turbokv_cli_lib turbokv::client
                        GTest::gtest_main)
  if(TARGET turbokv-server)
    add_dependencies(client_integration_tests turbokv-server)
  endif()
  add_test(NAME client_integration_tests COMMAND client_integration_tests)
  set_tests_properties(client_integration_tests PROPERTIES LABELS integration TIMEOUT 600)

  # The Python client and CLI tests (tests/python/test_client*.py) through pytest, when a
  # Python with grpcio, grpcio-tools, numpy and pytest is configured:
  #   cmake -DTURBOKV_PYTHON=/path/to/venv/bin/python ...
  set(TURBOKV_PYTHON "" CACHE FILEPATH "Python for the Python client tests (empty: not run)")
  if(TURBOKV_PYTHON)
    file(GLOB _client_py_tests ${CMAKE_SOURCE_DIR}/tests/python/test_client*.py)
    add_test(NAME client_python_tests
             COMMAND ${TURBOKV_PYTHON} -m pytest -q ${_client_py_tests}
             WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
    set_tests_properties(client_python_tests PROPERTIES LABELS integration TIMEOUT 900
                         ENVIRONMENT "TURBOKV_BUILD_DIR=${CMAKE_BINARY_DIR}")
  endif()
endif()
