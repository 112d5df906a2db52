// PeriodicTasks (common/periodic_tasks.h) on a manual clock: when tasks run, Trigger and
// SetInterval, failures and exceptions, Cancel and Shutdown. Deterministic: the clock only moves
// when a test moves it, and RunDueForTest runs on the test's thread. One test uses the real
// thread, and waits on events, never on time.
#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/periodic_tasks.h"
#include "gtest/gtest.h"

namespace turbokv {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class PeriodicTasksTest : public ::testing::Test {
 protected:
  PeriodicTasks::Clock::time_point now_{seconds(1000)};
  std::unique_ptr<PeriodicTasks> tasks_ = PeriodicTasks::ManualForTest([this] { return now_; });

  void Advance(PeriodicTasks::Clock::duration d) { now_ += d; }
};

TEST_F(PeriodicTasksTest, RunsEveryIntervalAfterTheLastRun) {
  int a = 0;
  int b = 0;
  PeriodicTasks::Handle ha = tasks_->Add("a", milliseconds(100), [&] {
    ++a;
    return absl::OkStatus();
  });
  PeriodicTasks::Handle hb = tasks_->Add("b", milliseconds(250), [&] {
    ++b;
    return absl::OkStatus();
  });
  EXPECT_EQ(tasks_->RunDueForTest(), 0u);  // first run is one interval after Add
  Advance(milliseconds(99));
  EXPECT_EQ(tasks_->RunDueForTest(), 0u);
  Advance(milliseconds(1));
  EXPECT_EQ(tasks_->RunDueForTest(), 1u);
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 0);
  Advance(milliseconds(150));  // t = 250: a due at 200, b at 250
  EXPECT_EQ(tasks_->RunDueForTest(), 2u);
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 1);
  Advance(milliseconds(1000));  // a missed runs are not made up: once per call
  EXPECT_EQ(tasks_->RunDueForTest(), 2u);
  EXPECT_EQ(a, 3);
  EXPECT_EQ(b, 2);
  const std::vector<PeriodicTasks::TaskStatus> status = tasks_->Snapshot();
  ASSERT_EQ(status.size(), 2u);
  EXPECT_EQ(status[0].name, "a");
  EXPECT_EQ(status[0].runs, 3u);
  EXPECT_EQ(status[1].name, "b");
  EXPECT_EQ(status[1].interval, milliseconds(250));
}

TEST_F(PeriodicTasksTest, TriggerRunsNowAndRestartsTheInterval) {
  int runs = 0;
  PeriodicTasks::Handle h = tasks_->Add("t", seconds(60), [&] {
    ++runs;
    return absl::OkStatus();
  });
  Advance(seconds(10));
  h.Trigger();
  EXPECT_EQ(tasks_->RunDueForTest(), 1u);
  EXPECT_EQ(runs, 1);
  Advance(seconds(59));  // 60 s after the triggered run, not after Add
  EXPECT_EQ(tasks_->RunDueForTest(), 0u);
  Advance(seconds(1));
  EXPECT_EQ(tasks_->RunDueForTest(), 1u);
  EXPECT_EQ(runs, 2);
}

TEST_F(PeriodicTasksTest, TriggerDuringItsOwnRunRunsItAgainRightAfter) {
  int runs = 0;
  PeriodicTasks::Handle h;
  h = tasks_->Add("self", seconds(5), [&] {
    if (++runs == 1) h.Trigger();
    return absl::OkStatus();
  });
  Advance(seconds(5));
  EXPECT_EQ(tasks_->RunDueForTest(), 1u);  // at most once per call
  EXPECT_EQ(tasks_->RunDueForTest(), 1u);  // due again at once, no time passed
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(tasks_->RunDueForTest(), 0u);
}

TEST_F(PeriodicTasksTest, SetIntervalReschedulesFromNow) {
  int runs = 0;
  PeriodicTasks::Handle h = tasks_->Add("t", seconds(10), [&] {
    ++runs;
    return absl::OkStatus();
  });
  Advance(seconds(8));
  h.SetInterval(seconds(3));  // due at 11, not 10
  Advance(seconds(2));
  EXPECT_EQ(tasks_->RunDueForTest(), 0u);
  Advance(seconds(1));
  EXPECT_EQ(tasks_->RunDueForTest(), 1u);
  Advance(seconds(3));
  EXPECT_EQ(tasks_->RunDueForTest(), 1u);
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(tasks_->Snapshot()[0].interval, seconds(3));
}

TEST_F(PeriodicTasksTest, FailuresAndExceptionsAreRecordedAndTheTaskStaysScheduled) {
  int runs = 0;
  PeriodicTasks::Handle h = tasks_->Add("flaky", seconds(1), [&]() -> absl::Status {
    ++runs;
    if (runs == 1) return absl::UnavailableError("disk full");
    if (runs == 2) throw std::runtime_error("boom");
    return absl::OkStatus();
  });
  Advance(seconds(1));
  ASSERT_EQ(tasks_->RunDueForTest(), 1u);
  PeriodicTasks::TaskStatus s = tasks_->Snapshot()[0];
  EXPECT_EQ(s.failures, 1u);
  EXPECT_EQ(s.last.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.last.message(), "disk full");

  Advance(seconds(1));
  ASSERT_EQ(tasks_->RunDueForTest(), 1u);
  s = tasks_->Snapshot()[0];
  EXPECT_EQ(s.failures, 2u);
  EXPECT_EQ(s.last.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.last.message(), "exception: boom");

  Advance(seconds(1));
  ASSERT_EQ(tasks_->RunDueForTest(), 1u);
  s = tasks_->Snapshot()[0];
  EXPECT_EQ(s.runs, 3u);
  EXPECT_EQ(s.failures, 2u);
  EXPECT_TRUE(s.last.ok());
}

TEST_F(PeriodicTasksTest, CancelAndHandleDestructionRemoveTheTask) {
  int runs = 0;
  auto count = [&] {
    ++runs;
    return absl::OkStatus();
  };
  PeriodicTasks::Handle kept = tasks_->Add("kept", seconds(1), count);
  {
    PeriodicTasks::Handle dropped = tasks_->Add("dropped", seconds(1), count);
    EXPECT_TRUE(dropped.active());
  }
  PeriodicTasks::Handle cancelled = tasks_->Add("cancelled", seconds(1), count);
  cancelled.Cancel();
  cancelled.Cancel();  // idempotent
  EXPECT_FALSE(cancelled.active());
  cancelled.Trigger();  // does nothing
  ASSERT_EQ(tasks_->Snapshot().size(), 1u);
  EXPECT_EQ(tasks_->Snapshot()[0].name, "kept");
  Advance(seconds(1));
  EXPECT_EQ(tasks_->RunDueForTest(), 1u);
  EXPECT_EQ(runs, 1);

  PeriodicTasks::Handle moved = std::move(kept);
  EXPECT_FALSE(kept.active());  // NOLINT(bugprone-use-after-move): checking the moved-from state
  EXPECT_TRUE(moved.active());
}

TEST_F(PeriodicTasksTest, ATaskMayCancelItselfDuringItsRun) {
  int runs = 0;
  PeriodicTasks::Handle h;
  h = tasks_->Add("once", seconds(1), [&] {
    ++runs;
    h.Cancel();  // must not wait for its own run
    return absl::OkStatus();
  });
  Advance(seconds(1));
  EXPECT_EQ(tasks_->RunDueForTest(), 1u);
  Advance(seconds(1));
  EXPECT_EQ(tasks_->RunDueForTest(), 0u);
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(tasks_->Snapshot().empty());
}

TEST_F(PeriodicTasksTest, NothingRunsOrIsAddedAfterShutdown) {
  int runs = 0;
  PeriodicTasks::Handle h = tasks_->Add("t", seconds(1), [&] {
    ++runs;
    return absl::OkStatus();
  });
  tasks_->Shutdown();
  tasks_->Shutdown();  // idempotent
  Advance(seconds(5));
  EXPECT_EQ(tasks_->RunDueForTest(), 0u);
  EXPECT_EQ(runs, 0);
  PeriodicTasks::Handle late = tasks_->Add("late", seconds(1), [] { return absl::OkStatus(); });
  EXPECT_FALSE(late.active());
  h.Trigger();  // a handle of a stopped service stays safe to use and to destroy
}

// The real thread: Trigger wakes it (the interval is an hour, so only Trigger can cause a
// run), and Cancel returns only once a run in progress has ended.
TEST(PeriodicTasksThreadTest, TriggerWakesTheThreadAndCancelWaitsForTheRun) {
  PeriodicTasks tasks("tkv-test");
  std::promise<void> started;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  bool finished = false;
  PeriodicTasks::Handle h = tasks.Add("blocking", std::chrono::hours(1), [&] {
    started.set_value();
    released.wait();
    finished = true;
    return absl::OkStatus();
  });
  h.Trigger();
  started.get_future().wait();
  std::future<void> cancelled = std::async(std::launch::async, [&] { h.Cancel(); });
  // Cancel is blocked on the run: releasing it lets Cancel return, and the run has finished.
  release.set_value();
  cancelled.wait();
  EXPECT_TRUE(finished);
  EXPECT_TRUE(tasks.Snapshot().empty());
  tasks.Shutdown();
}

}  // namespace
}  // namespace turbokv
