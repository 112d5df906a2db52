// Starts the real turbokv-server binary for client integration tests: 127.0.0.1, a free port
// (--listen 127.0.0.1:0 --port-file), metrics off, and a fresh temporary --data-dir.
//
// The binary is $TURBOKV_SERVER_BIN, else <build>/bin/turbokv-server (compiled in as
// TURBOKV_DEFAULT_SERVER_BIN). Tests call GTEST_SKIP() when Start() returns NotFound.
#ifndef TURBOKV_TESTS_INTEGRATION_CLIENT_TEST_SERVER_H_
#define TURBOKV_TESTS_INTEGRATION_CLIENT_TEST_SERVER_H_

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace turbokv::testing {

class TestServer {
 public:
  TestServer() = default;
  TestServer(const TestServer&) = delete;
  TestServer& operator=(const TestServer&) = delete;
  ~TestServer() {
    Stop();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }

  static std::string BinaryPath() {
    if (const char* env = std::getenv("TURBOKV_SERVER_BIN"); env != nullptr && *env) return env;
    return TURBOKV_DEFAULT_SERVER_BIN;
  }

  // NotFound when the binary is missing; Internal when it does not come up in 30 s.
  absl::Status Start() {
    const std::string bin = BinaryPath();
    if (access(bin.c_str(), X_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat("turbokv-server binary not found at ", bin, " (set TURBOKV_SERVER_BIN)"));
    }
    if (dir_.empty()) {
      std::string tmpl = (std::filesystem::temp_directory_path() / "turbokv-client-XXXXXX");
      if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("mkdtemp failed");
      dir_ = tmpl;
    }
    const std::string port_file = absl::StrCat(dir_, "/port-", ++starts_);
    const std::string data_dir = dir_ + "/data";
    const std::string log = dir_ + "/server.log";
    std::vector<std::string> args = {
        bin,       "--listen",        "127.0.0.1:0", "--port-file",
        port_file, "--data-dir",      data_dir,      "--metrics-listen",
        "",        "--codec-threads", "2",           "--log-level",
        "warn"};
    pid_ = fork();
    if (pid_ < 0) return absl::InternalError("fork failed");
    if (pid_ == 0) {
      FILE* f = std::fopen(log.c_str(), "a");
      if (f != nullptr) {
        dup2(fileno(f), 1);
        dup2(fileno(f), 2);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return absl::InternalError(
            absl::StrCat("turbokv-server exited during start-up; see ", log));
      }
      std::ifstream in(port_file);
      int port = 0;
      if (in >> port && port > 0) {
        port_ = port;
        return absl::OkStatus();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Stop();
    return absl::InternalError(absl::StrCat("turbokv-server did not start in 30 s; see ", log));
  }

  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    for (int i = 0; i < 1500; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  std::string dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  int starts_ = 0;
};

}  // namespace turbokv::testing

#endif  // TURBOKV_TESTS_INTEGRATION_CLIENT_TEST_SERVER_H_
