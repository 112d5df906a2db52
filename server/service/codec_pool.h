// Worker threads, so gRPC's threads only move messages. The server
// runs two: the codec pool (encode, decode, verify: CPU-bound) and the I/O pool (RocksDB reads
// and writes, which may wait on the disk), so encodes never queue behind an fsync and
// concurrent writes reach RocksDB together (its group commit batches them).
//
// Bounded: at most `max_queued` tasks wait; Submit refuses more (the caller answers
// RESOURCE_EXHAUSTED). An exception barrier runs every task: one that throws is logged,
// counted, and its `on_exception` callback gets an INTERNAL status (so that call, and only
// that call, fails); the worker and the process carry on.
//
// Thread safety: Submit may be called from any thread, also from a task. The destructor runs
// every task already queued, then joins.
#ifndef TURBOKV_SERVER_SERVICE_CODEC_POOL_H_
#define TURBOKV_SERVER_SERVICE_CODEC_POOL_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"

namespace turbokv::server {

class CodecPool {
 public:
  using Task = std::function<void()>;
  // Called with an INTERNAL status when the task threw. Must not throw.
  using OnException = std::function<void(const absl::Status&)>;

  // `name` labels log lines ("codec", "io"). threads >= 1 (smaller is raised to 1),
  // max_queued >= 1.
  CodecPool(std::string name, int threads, size_t max_queued);
  ~CodecPool();
  CodecPool(const CodecPool&) = delete;
  CodecPool& operator=(const CodecPool&) = delete;

  // Queues `task`. False, and nothing queued, when max_queued tasks are already waiting.
  [[nodiscard]] bool Submit(Task task, OnException on_exception);

  int threads() const { return static_cast<int>(workers_.size()); }
  const std::string& name() const { return name_; }
  size_t max_queued() const { return max_queued_; }
  size_t queued() const;
  uint64_t exceptions() const { return exceptions_.load(); }  // tasks that threw, since start

 private:
  struct Item {
    Task task;
    OnException on_exception;
  };
  void Run();
  void RunGuarded(Item& item);

  const std::string name_;
  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::atomic<uint64_t> exceptions_{0};
  std::vector<std::thread> workers_;
};

// RESOURCE_EXHAUSTED naming the pool and its bound, for a refused Submit.
absl::Status PoolFull(const CodecPool& pool);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVICE_CODEC_POOL_H_
