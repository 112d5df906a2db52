// Runs the real turbokv-server binary for the server integration tests: 127.0.0.1 on a free
// port (--listen 127.0.0.1:0 --port-file), a temporary data directory that survives restarts
// of the same ServerProcess, and a generated-stub channel. No client library involved.
// Also what those tests share: the slowdown factor of sanitizer builds (TimeScale, Scaled),
// block hashes, random fp16 blocks, and a client on a connection of its own.
#ifndef TURBOKV_TESTS_INTEGRATION_SERVER_PROCESS_H_
#define TURBOKV_TESTS_INTEGRATION_SERVER_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "turbokv/v1/turbokv.grpc.pb.h"

namespace turbokv::server::testing {

// Whether this is a ThreadSanitizer / AddressSanitizer build (GCC's and clang's spellings).
#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// How many times slower than a plain build these tests run: $TURBOKV_TEST_TIME_SCALE when it
// is a number >= 1, else 10 in a ThreadSanitizer build (the server and the test are both
// instrumented: 5-20x), 3 under AddressSanitizer, 1 otherwise. Client deadlines and the
// tests' waits are multiplied by it; what the tests check is not.
inline double TimeScale() {
  static const double scale = [] {
    if (const char* env = std::getenv("TURBOKV_TEST_TIME_SCALE")) {
      char* end = nullptr;
      const double v = std::strtod(env, &end);
      if (end != env && v >= 1) return v;
    }
    return kThreadSanitizer ? 10.0 : kAddressSanitizer ? 3.0 : 1.0;
  }();
  return scale;
}
// True in a build whose TimeScale() is above 1 (a sanitizer, or the variable set).
inline bool SlowBuild() { return TimeScale() > 1; }

// `d` x TimeScale(), in milliseconds.
template <class Rep, class Period>
std::chrono::milliseconds Scaled(std::chrono::duration<Rep, Period> d) {
  return std::chrono::milliseconds(
      static_cast<int64_t>(std::chrono::duration<double, std::milli>(d).count() * TimeScale()));
}

// A client deadline `d` x TimeScale() from now.
template <class Rep, class Period>
std::chrono::system_clock::time_point DeadlineIn(std::chrono::duration<Rep, Period> d) {
  return std::chrono::system_clock::now() + Scaled(d);
}

// A 16-byte block hash derived from `i` (distinct for distinct i).
inline std::string Hash(uint64_t i) {
  std::string h(16, '\0');
  for (size_t k = 0; k < 16; ++k) h[k] = static_cast<char>((i >> (8 * (k % 8))) ^ (k * 41 + 7));
  return h;
}

// `bytes` bytes of fp16 values in [-2, 2): random bit patterns with the exponent bits bounded.
inline std::string RandomFp16(size_t bytes, std::mt19937_64& rng) {
  std::string out(bytes, '\0');
  for (size_t i = 0; i + 1 < bytes; i += 2) {
    const uint16_t h = static_cast<uint16_t>((rng() & 0x83ff) | ((8 + rng() % 8) << 10));
    std::memcpy(&out[i], &h, 2);
  }
  return out;
}

// A stub on a channel of its own (own connection, 64 MiB messages), like a separate client
// process.
inline std::unique_ptr<v1::TurboKV::Stub> NewClient(int port) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  return v1::TurboKV::NewStub(grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                                        grpc::InsecureChannelCredentials(), args));
}

class ServerProcess {
 public:
  explicit ServerProcess(std::vector<std::string> extra_args = {})
      : extra_args_(std::move(extra_args)) {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() /
           ("turbokv-server-it-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(dir_);
  }
  ~ServerProcess() {
    if (pid_ > 0) Stop(SIGKILL);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // $TURBOKV_SERVER_BIN (e.g. an older build, to show a test fails there), else the binary
  // of this build.
  static std::string BinaryPath() {
    const char* env = std::getenv("TURBOKV_SERVER_BIN");
    return env != nullptr && *env != '\0' ? env : TURBOKV_SERVER_BINARY;
  }

  // Starts the binary and waits (up to 30 s x TimeScale()) for its port file. False when it
  // exits first.
  bool Start() {
    const std::string port_file = (dir_ / ("port-" + std::to_string(++starts_))).string();
    std::vector<std::string> args = {BinaryPath(),
                                     "--port-file",
                                     port_file,
                                     "--data-dir",
                                     (dir_ / "data").string(),
                                     "--codec-threads",
                                     "2"};
    if (std::find(extra_args_.begin(), extra_args_.end(), "--shutdown-grace-ms") ==
        extra_args_.end()) {
      args.insert(args.end(), {"--shutdown-grace-ms", "2000"});
    }
    if (std::find(extra_args_.begin(), extra_args_.end(), "--listen") == extra_args_.end()) {
      args.insert(args.end(), {"--listen", "127.0.0.1:0"});
    }
    if (std::find(extra_args_.begin(), extra_args_.end(), "--metrics-listen") ==
        extra_args_.end()) {
      args.insert(args.end(), {"--metrics-listen", ""});  // off unless a test asks for it
    }
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    const std::string log = log_path();
    pid_ = fork();
    if (pid_ == 0) {
      // The server goes with the test, also when the test is killed (a timeout); tied to the
      // thread that calls Start(), so tests start servers on their main thread.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + Scaled(std::chrono::seconds(30));
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        exit_status_ = status;
        return false;
      }
      std::ifstream in(port_file);
      int port = 0;
      if (in >> port && port > 0) {
        port_ = port;
        in >> metrics_port_;
        channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                       grpc::InsecureChannelCredentials());
        stub_ = v1::TurboKV::NewStub(channel_);
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  // Sends `sig` and waits for the process. Returns the raw wait status.
  int Stop(int sig = SIGTERM) {
    if (pid_ <= 0) return exit_status_;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_status_ = status;
    stub_.reset();
    channel_.reset();
    return status;
  }

  // Sends `sig` without waiting.
  void Signal(int sig) {
    if (pid_ > 0) kill(pid_, sig);
  }
  // Waits for the process to exit (after Signal). Returns the raw wait status.
  int Wait() {
    if (pid_ <= 0) return exit_status_;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_status_ = status;
    return status;
  }

  // Waits for a process that exits by itself (e.g. a failed start). Raw wait status.
  int exit_status() const { return exit_status_; }

  v1::TurboKV::Stub& stub() { return *stub_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  int metrics_port() const { return metrics_port_; }
  std::string log_path() const { return (dir_ / "server.log").string(); }
  std::string data_dir() const { return (dir_ / "data").string(); }
  std::string Log() const {
    std::ifstream in(log_path());
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  std::vector<std::string> extra_args_;
  std::filesystem::path dir_;
  pid_t pid_ = -1;
  int starts_ = 0;
  int exit_status_ = 0;
  int port_ = 0;
  int metrics_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TurboKV::Stub> stub_;
};

}  // namespace turbokv::server::testing

#endif  // TURBOKV_TESTS_INTEGRATION_SERVER_PROCESS_H_
