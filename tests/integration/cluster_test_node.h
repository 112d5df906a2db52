// One real turbokv-server for the integration tests (cluster and client suites): 127.0.0.1, a
// free port on first start and the same port and data directory on every restart (a node's
// identity is its endpoint), metrics off. Kill() is SIGKILL (a crash); Stop() is SIGTERM.
//
// The binary is $TURBOKV_SERVER_BIN, else TURBOKV_DEFAULT_SERVER_BIN (compiled in).
#ifndef TURBOKV_TESTS_INTEGRATION_CLUSTER_TEST_NODE_H_
#define TURBOKV_TESTS_INTEGRATION_CLUSTER_TEST_NODE_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace turbokv::testing {

class ClusterNode {
 public:
  struct Options {
    int codec_threads = 1;
    std::string data_dir;  // "" = <dir>/data
    std::string log_level = "warn";
    std::vector<std::string> extra_args;  // appended to the command line
  };
  // `dir` holds the data directory, port files and server.log; it is not removed.
  explicit ClusterNode(std::string dir, int codec_threads = 1)
      : ClusterNode(std::move(dir), WithThreads(codec_threads)) {}
  ClusterNode(std::string dir, Options options)
      : dir_(std::move(dir)), options_(std::move(options)) {
    std::filesystem::create_directories(dir_);
  }
  ClusterNode(const ClusterNode&) = delete;
  ClusterNode& operator=(const ClusterNode&) = delete;
  ~ClusterNode() { Stop(); }
  static Options WithThreads(int codec_threads) {
    Options o;
    o.codec_threads = codec_threads;
    return o;
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
    const std::string port_file = absl::StrCat(dir_, "/port-", ++starts_);
    const std::string log = dir_ + "/server.log";
    std::vector<std::string> args = {bin,
                                     "--listen",
                                     absl::StrCat("127.0.0.1:", port_),
                                     "--port-file",
                                     port_file,
                                     "--data-dir",
                                     data_dir(),
                                     "--metrics-listen",
                                     "",
                                     "--codec-threads",
                                     absl::StrCat(options_.codec_threads),
                                     "--log-level",
                                     options_.log_level};
    args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
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
        exit_status_ = status;
        return absl::InternalError(absl::StrCat("turbokv-server exited; see ", log));
      }
      std::ifstream in(port_file);
      int port = 0;
      if (in >> port && port > 0) {
        port_ = port;
        return absl::OkStatus();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Kill();
    return absl::InternalError(absl::StrCat("turbokv-server did not start in 30 s; see ", log));
  }

  void Kill() { Signal(SIGKILL); }
  void Stop() { Signal(SIGTERM); }

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  std::string data_dir() const {
    return options_.data_dir.empty() ? dir_ + "/data" : options_.data_dir;
  }
  std::string log_path() const { return dir_ + "/server.log"; }
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }
  // Raw wait status of the last exit (a failed start, Kill, Stop, or a crash seen by Exited).
  int exit_status() const { return exit_status_; }
  // True when the process has exited by itself (then exit_status() says how).
  bool Exited() {
    int status = 0;
    if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      exit_status_ = status;
      return true;
    }
    return pid_ <= 0;
  }

 private:
  void Signal(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    for (int i = 0; i < 1500; ++i) {
      if (waitpid(pid_, &exit_status_, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &exit_status_, 0);
    pid_ = -1;
  }

  std::string dir_;
  Options options_;
  int exit_status_ = 0;
  pid_t pid_ = -1;
  int port_ = 0;
  int starts_ = 0;
};

}  // namespace turbokv::testing

#endif  // TURBOKV_TESTS_INTEGRATION_CLUSTER_TEST_NODE_H_
