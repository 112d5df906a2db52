// The request path's admission pieces: the worker pool (bounded queue, exception barrier) and
// the server-wide in-flight byte budget (grants, waits, timeouts, cancellation, order).
#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/service/byte_budget.h"
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
  ASSERT_TRUE(pool.Submit([&started, gate] {  // gate by value: it outlives this scope's
    started.set_value();
    gate.wait();
  }, nullptr));
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

TEST(ByteBudgetTest, GrantsWaitsInOrderAndTimesOut) {
  ByteBudget budget(100);
  auto never = [](const absl::Status&) { FAIL() << "must not run"; };
  EXPECT_EQ(budget.Acquire(60, milliseconds(1000), never), 0u);  // granted at once
  EXPECT_EQ(budget.in_use(), 60u);

  std::promise<absl::Status> second, third;
  const ByteBudget::Ticket t2 =
      budget.Acquire(50, milliseconds(5000), [&](const absl::Status& s) { second.set_value(s); });
  ASSERT_NE(t2, 0u);
  // Would fit, but a waiter is ahead: waits too (no overtaking).
  const ByteBudget::Ticket t3 =
      budget.Acquire(10, milliseconds(5000), [&](const absl::Status& s) { third.set_value(s); });
  ASSERT_NE(t3, 0u);
  budget.Release(60);  // both are granted, in order
  EXPECT_TRUE(second.get_future().get().ok());
  EXPECT_TRUE(third.get_future().get().ok());
  EXPECT_EQ(budget.in_use(), 60u);

  // Nothing is released: a waiter gets RESOURCE_EXHAUSTED naming the limit after its timeout.
  std::promise<absl::Status> late;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_NE(budget.Acquire(50, milliseconds(200), [&](const absl::Status& s) { late.set_value(s); }),
            0u);
  const absl::Status s = late.get_future().get();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(190));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max-in-flight-bytes 100"), std::string::npos) << s;
  EXPECT_EQ(budget.rejected(), 1u);
  EXPECT_EQ(budget.in_use(), 60u);
}

TEST(ByteBudgetTest, CancelledWaitersNeverRunAndOversizedRequestsGoAlone) {
  ByteBudget budget(100);
  EXPECT_EQ(budget.Acquire(1000, milliseconds(10), nullptr), 0u);  // nothing in use: granted
  std::atomic<int> runs{0};
  const ByteBudget::Ticket t =
      budget.Acquire(10, milliseconds(60000), [&](const absl::Status&) { ++runs; });
  ASSERT_NE(t, 0u);
  EXPECT_TRUE(budget.Cancel(t));
  EXPECT_FALSE(budget.Cancel(t));
  budget.Release(1000);
  EXPECT_EQ(runs.load(), 0);
  EXPECT_EQ(budget.in_use(), 0u);

  // Shutdown fails whoever still waits.
  EXPECT_EQ(budget.Acquire(100, milliseconds(10), nullptr), 0u);
  std::promise<absl::Status> w;
  ASSERT_NE(budget.Acquire(1, milliseconds(60000), [&](const absl::Status& s) { w.set_value(s); }),
            0u);
  budget.Shutdown();
  EXPECT_EQ(w.get_future().get().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace turbokv::server
