// The request path's admission pieces: the worker pool (bounded queue, exception barrier). The
// in-flight byte budget and its leases: server_budget_test.cc.
#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/service/codec_pool.h"

namespace turbokv::server {
namespace {

using std::chrono::milliseconds;

TEST(CodecPoolTest, AThrowingTaskFailsOnlyItsOwnCall) {
  CodecPool pool("codec", 2, 16);
  std::promise<absl::Status> failed;
  ASSERT_TRUE(pool.Submit([] { throw std::runtime_error("boom"); },
                          [&](const absl::Status& s) { failed.set_value(s); }));
  const absl::Status s = failed.get_future().get();
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("boom"), std::string::npos) << s;
  EXPECT_NE(s.message().find("codec pool"), std::string::npos) << s;
  // The pool and its threads carry on.
  std::promise<int> ran;
  ASSERT_TRUE(pool.Submit([&] { ran.set_value(7); }, nullptr));
  EXPECT_EQ(ran.get_future().get(), 7);
  EXPECT_EQ(pool.exceptions(), 1u);
}

TEST(CodecPoolTest, TheQueueIsBounded) {
  CodecPool pool("io", 1, 2);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::promise<void> started;
  ASSERT_TRUE(pool.Submit(
      [&started, gate] {  // gate by value: it outlives this scope's
        started.set_value();
        gate.wait();
      },
      nullptr));
  started.get_future().wait();  // the worker is busy; the queue is empty
  EXPECT_TRUE(pool.Submit([] {}, nullptr));
  EXPECT_TRUE(pool.Submit([] {}, nullptr));
  EXPECT_FALSE(pool.Submit([] {}, nullptr));  // third waiting task: refused
  EXPECT_EQ(pool.queued(), 2u);
  const absl::Status full = PoolFull(pool);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("io queue is full (2 tasks"), std::string::npos) << full;
  release.set_value();
}

}  // namespace
}  // namespace turbokv::server
