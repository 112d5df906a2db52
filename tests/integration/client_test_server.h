// Starts the real turbokv-server binary for client integration tests: 127.0.0.1, a free port
// (--listen 127.0.0.1:0 --port-file), metrics off, and a fresh temporary --data-dir that is
// removed afterwards. A ClusterNode (cluster_test_node.h) in a temporary directory.
//
// The binary is $TURBOKV_SERVER_BIN, else <build>/bin/turbokv-server (compiled in as
// TURBOKV_DEFAULT_SERVER_BIN). Tests call GTEST_SKIP() when Start() returns NotFound.
#ifndef TURBOKV_TESTS_INTEGRATION_CLIENT_TEST_SERVER_H_
#define TURBOKV_TESTS_INTEGRATION_CLIENT_TEST_SERVER_H_

#include <filesystem>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "cluster_test_node.h"

namespace turbokv::testing {

class TestServer {
 public:
  TestServer() : dir_(TempDir()), node_(dir_, /*codec_threads=*/2) {}
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;
  ~TestServer() {
    node_.Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  static std::string BinaryPath() { return ClusterNode::BinaryPath(); }
  // NotFound when the binary is missing; Internal when it does not come up in 30 s.
  absl::Status Start() { return node_.Start(); }
  void Stop() { node_.Stop(); }
  std::string address() const { return node_.address(); }

 private:
  static std::string TempDir() {
    std::random_device rd;
    return (std::filesystem::temp_directory_path() /
            ("turbokv-client-" + std::to_string(rd()) + std::to_string(rd())))
        .string();
  }

  std::string dir_;
  ClusterNode node_;
};

}  // namespace turbokv::testing

#endif  // TURBOKV_TESTS_INTEGRATION_CLIENT_TEST_SERVER_H_
