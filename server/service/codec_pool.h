// Worker threads for codec and storage work, so gRPC's threads only move messages
// (STYLE.md "Request path"). A plain FIFO queue.
//
// Thread safety: Submit may be called from any thread. The destructor runs every task already
// submitted, then joins.
#ifndef TURBOKV_SERVER_SERVICE_CODEC_POOL_H_
#define TURBOKV_SERVER_SERVICE_CODEC_POOL_H_

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace turbokv::server {

class CodecPool {
 public:
  // threads >= 1.
  explicit CodecPool(int threads);
  ~CodecPool();
  CodecPool(const CodecPool&) = delete;
  CodecPool& operator=(const CodecPool&) = delete;

  void Submit(std::function<void()> task);
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_CODEC_POOL_H_
