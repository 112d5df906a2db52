// The store's maintenance as a task on an injected PeriodicTasks (common/periodic_tasks.h): it
// is added by Open with the configured interval, runs RunMaintenance (here: TTL expiry) when
// due, and is removed when the store closes. A manual clock drives it: no thread, no sleeps.
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/periodic_tasks.h"
#include "storage_store_fixture.h"

namespace turbokv::server::testing {
namespace {

constexpr uint64_t kNs = 0x0123456789abcdefULL;

class MaintenanceTaskTest : public StoreFixture {
 protected:
  MaintenanceTaskTest() : StoreFixture(7) {}

  PeriodicTasks::Clock::time_point tasks_now_{std::chrono::seconds(1)};
  std::unique_ptr<PeriodicTasks> tasks_ =
      PeriodicTasks::ManualForTest([this] { return tasks_now_; });
};

TEST_F(MaintenanceTaskTest, RunsOnTheInjectedServiceAndLeavesWithTheStore) {
  StorageOptions o = Options();
  o.maintenance_interval_ms = 500;
  auto opened = BlockStore::Open(o, VerifyTrailer, &clock_, nullptr, tasks_.get());
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<BlockStore> s = *std::move(opened);
  std::vector<PeriodicTasks::TaskStatus> status = tasks_->Snapshot();
  ASSERT_EQ(status.size(), 1u);
  EXPECT_EQ(status[0].name, "store maintenance");
  EXPECT_EQ(status[0].interval, std::chrono::milliseconds(500));

  PutNamespace(*s, kNs, /*ttl_seconds=*/10);
  ASSERT_TRUE(Put(*s, kNs, HashOf(0), MakeValue(4096, rng_)).ok());
  clock_.now += 60;  // the block's TTL has passed; only a maintenance pass deletes it
  tasks_now_ += std::chrono::milliseconds(499);
  EXPECT_EQ(tasks_->RunDueForTest(), 0u);
  EXPECT_EQ(s->Stats().expired_blocks, 0u);
  tasks_now_ += std::chrono::milliseconds(1);
  EXPECT_EQ(tasks_->RunDueForTest(), 1u);
  EXPECT_EQ(s->Stats().expired_blocks, 1u);
  EXPECT_EQ(s->Stats().blocks, 0u);
  status = tasks_->Snapshot();
  EXPECT_EQ(status[0].runs, 1u);
  EXPECT_TRUE(status[0].last.ok()) << status[0].last;

  s.reset();  // the task goes with the store: nothing runs on a closed store
  EXPECT_TRUE(tasks_->Snapshot().empty());
  tasks_now_ += std::chrono::seconds(10);
  EXPECT_EQ(tasks_->RunDueForTest(), 0u);
}

TEST_F(MaintenanceTaskTest, NoTaskWithoutAnInterval) {
  auto s = BlockStore::Open(Options(), VerifyTrailer, &clock_, nullptr, tasks_.get());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(tasks_->Snapshot().empty());
}

}  // namespace
}  // namespace turbokv::server::testing
