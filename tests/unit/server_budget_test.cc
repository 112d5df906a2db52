// The in-flight byte budget (byte_budget.h) through its leases (budget_lease.h): grants, waits
// in order, timeouts, cancellation, tenant shares, the progress rule; and the call watchdog.
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "server/service/budget_lease.h"
#include "server/service/byte_budget.h"
#include "server/service/call_watchdog.h"

namespace turbokv::server {
namespace {

using std::chrono::milliseconds;

constexpr milliseconds kLong(60000);

// A callback that hands its status to a future.
struct Wait {
  std::promise<absl::Status> p;
  std::future<absl::Status> f = p.get_future();
  ByteBudget::Callback cb() {
    return [this](const absl::Status& s) { p.set_value(s); };
  }
  bool ready() { return f.wait_for(milliseconds(0)) == std::future_status::ready; }
};

auto Never() {
  return [](const absl::Status&) { ADD_FAILURE() << "must not run"; };
}

TEST(ByteBudgetTest, GrantsWaitsInOrderAndTimesOut) {
  ByteBudget budget(100);
  BudgetLease a(&budget, ""), b(&budget, ""), c(&budget, ""), d(&budget, "");
  EXPECT_TRUE(a.Acquire(60, kLong, Never()));  // granted at once
  EXPECT_EQ(budget.in_use(), 60u);
  EXPECT_EQ(a.held(), 60u);

  Wait second, third;
  EXPECT_FALSE(b.Acquire(50, kLong, second.cb()));
  // Would fit, but a waiter of its tenant is ahead: waits too (no overtaking).
  EXPECT_FALSE(c.Acquire(10, kLong, third.cb()));
  a.Release(60);  // both are granted, in order
  EXPECT_TRUE(second.f.get().ok());
  EXPECT_TRUE(third.f.get().ok());
  EXPECT_EQ(budget.in_use(), 60u);
  EXPECT_EQ(b.held(), 50u);

  // Nothing is released: a waiter gets RESOURCE_EXHAUSTED naming the limit after its timeout.
  Wait late;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(d.Acquire(50, milliseconds(200), late.cb()));
  const absl::Status s = late.f.get();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, milliseconds(190));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("max-in-flight-bytes 100"), std::string::npos) << s;
  EXPECT_EQ(budget.rejected(), 1u);
  EXPECT_EQ(budget.in_use(), 60u);
  EXPECT_EQ(d.held(), 0u);
}

TEST(ByteBudgetTest, CancelledWaitersNeverRunAndOversizedRequestsGoAlone) {
  ByteBudget budget(100);
  BudgetLease big(&budget, "t"), small(&budget, "t");
  EXPECT_TRUE(big.Acquire(1000, milliseconds(10), Never()));  // nothing in use: granted
  EXPECT_FALSE(small.Acquire(10, kLong, Never()));
  EXPECT_TRUE(small.Cancel());
  EXPECT_FALSE(small.Cancel());
  big.Release(1000);
  EXPECT_EQ(budget.in_use(), 0u);

  // Shutdown fails whoever still waits, and every later wait.
  EXPECT_TRUE(big.Acquire(100, milliseconds(10), Never()));
  Wait w, after;
  EXPECT_FALSE(small.Acquire(1, kLong, w.cb()));
  budget.Shutdown();
  EXPECT_EQ(w.f.get().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(small.Acquire(1, kLong, after.cb()));
  EXPECT_EQ(after.f.get().code(), absl::StatusCode::kUnavailable);
}

TEST(ByteBudgetTest, ALeaseGivesBackWhatItHoldsAndCancelsItsWait) {
  ByteBudget budget(100);
  BudgetLease other(&budget, "b");
  Wait granted;
  {
    BudgetLease lease(&budget, "a");
    EXPECT_TRUE(lease.Acquire(70, kLong, Never()));
    BudgetShare message = lease.Take(20);  // a message larger than its window
    EXPECT_EQ(budget.in_use(), 90u);
    EXPECT_FALSE(other.Acquire(30, kLong, granted.cb()));
    BudgetLease waiting(&budget, "a");
    EXPECT_FALSE(waiting.Acquire(50, kLong, Never()));
  }  // both leases end: the waiter is cancelled (its callback never runs), the 90 bytes return
  EXPECT_TRUE(granted.f.get().ok());
  EXPECT_EQ(budget.in_use(), 30u);
  EXPECT_EQ(budget.tenant_in_use("a"), 0u);
  // A moved-from lease holds nothing; the moved-to one gives back on its end.
  BudgetLease moved(std::move(other));
  EXPECT_EQ(other.held(), 0u);  // NOLINT(bugprone-use-after-move): the contract under test
  EXPECT_EQ(moved.held(), 30u);
  moved = BudgetLease();
  EXPECT_EQ(budget.in_use(), 0u);
}

TEST(ByteBudgetTest, SharesSplitMergeAndGiveBackWhenTheirOwnerDropsThem) {
  ByteBudget budget(100);
  BudgetShare outlives;
  {
    BudgetLease lease(&budget, "a");
    ASSERT_TRUE(lease.Acquire(60, kLong, Never()));
    BudgetShare window = lease.Granted(60);
    BudgetShare block = window.Split(25);  // a block's chunk, paid from the window
    EXPECT_EQ(window.bytes(), 35u);
    EXPECT_EQ(block.bytes(), 25u);
    block.Absorb(lease.Take(10));  // more than the window had: taken without waiting
    EXPECT_EQ(block.bytes(), 35u);
    EXPECT_EQ(budget.in_use(), 70u);
    BudgetShare too_much = window.Split(1000);  // at most what the share holds
    EXPECT_EQ(too_much.bytes(), 35u);
    EXPECT_EQ(window.bytes(), 0u);
    too_much.Reset();  // dropped: back to the budget now
    EXPECT_EQ(budget.in_use(), 35u);
    EXPECT_EQ(lease.held(), 35u);
    outlives = std::move(block);  // the block outlives its call's lease
  }
  EXPECT_EQ(budget.in_use(), 35u);
  EXPECT_EQ(budget.tenant_in_use("a"), 35u);
  outlives = BudgetShare();  // its owner lets go: the tenant's account closes with it
  EXPECT_EQ(budget.in_use(), 0u);
  EXPECT_EQ(budget.tenant_in_use("a"), 0u);
}

TEST(ByteBudgetTest, NoTenantHoldsMoreThanItsShare) {
  // 1000 bytes, a tenant may hold 500: tenant a's calls wait at 500 while b's are served.
  ByteBudget budget(1000, 0.5);
  EXPECT_EQ(budget.tenant_limit(), 500u);
  BudgetLease a1(&budget, "a"), a2(&budget, "a"), a3(&budget, "a");
  BudgetLease b1(&budget, "b"), b2(&budget, "b");
  EXPECT_TRUE(a1.Acquire(400, kLong, Never()));
  Wait a_more, a_late;
  EXPECT_FALSE(a2.Acquire(200, kLong, a_more.cb()));  // 600 > a's 500, though 600 < 1000
  // b is not held up by a's waiter (another tenant's queue).
  EXPECT_TRUE(b1.Acquire(500, kLong, Never()));
  EXPECT_EQ(budget.tenant_in_use("a"), 400u);
  EXPECT_EQ(budget.tenant_in_use("b"), 500u);
  // Over b's share: waits, and times out naming the share.
  Wait b_over;
  EXPECT_FALSE(b2.Acquire(50, milliseconds(100), b_over.cb()));
  const absl::Status s = b_over.f.get();
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("this tenant's share of the in-flight budget (500 bytes"),
            std::string::npos)
      << s;
  // a's own release lets its waiter through.
  EXPECT_FALSE(a_more.ready());
  a1.Release(300);
  EXPECT_TRUE(a_more.f.get().ok());
  EXPECT_EQ(budget.tenant_in_use("a"), 300u);
  // Within its share but over the whole budget: waits for anyone's release.
  EXPECT_TRUE(a3.Acquire(150, kLong, Never()));  // a 450, b 500: 950
  Wait b_next;
  EXPECT_FALSE(b2.Acquire(100, kLong, b_next.cb()));  // b at its share
  b1.Release(100);
  EXPECT_TRUE(b_next.f.get().ok());
  EXPECT_EQ(budget.forced_grants(), 0u);
}

TEST(ByteBudgetTest, AWaitingTenantDoesNotHoldUpAnotherOnTheWholeBudget) {
  // a's first waiter does not fit the whole budget; b's smaller one does and goes first, and
  // a's is granted on the next release.
  ByteBudget budget(100, 0.8);
  BudgetLease a1(&budget, "a"), a2(&budget, "a"), b1(&budget, "b"), b2(&budget, "b");
  EXPECT_TRUE(a1.Acquire(50, kLong, Never()));
  EXPECT_TRUE(b1.Acquire(30, kLong, Never()));
  Wait a_wait;
  EXPECT_FALSE(a2.Acquire(30, kLong, a_wait.cb()));  // 110 > 100
  EXPECT_TRUE(b2.Acquire(20, kLong, Never()));       // 100: fits, not behind a's waiter
  b1.Release(30);
  EXPECT_TRUE(a_wait.f.get().ok());
  EXPECT_EQ(budget.in_use(), 100u);
}

TEST(ByteBudgetTest, WhenEveryHolderWaitsTheOneHoldingMostGoesOver) {
  // Two streams each hold part of a block and need more: nothing would ever be released. The
  // one holding more is let through over the limit; the other follows once bytes come back.
  ByteBudget budget(100);
  BudgetLease a(&budget, ""), b(&budget, "");
  EXPECT_TRUE(a.Acquire(40, kLong, Never()));
  EXPECT_TRUE(b.Acquire(60, kLong, Never()));
  Wait a_more, b_more;
  EXPECT_FALSE(a.Acquire(30, kLong, a_more.cb()));  // b does not wait: no forced grant
  EXPECT_EQ(budget.forced_grants(), 0u);
  EXPECT_FALSE(b.Acquire(30, kLong, b_more.cb()));  // now every holder waits
  EXPECT_TRUE(b_more.f.get().ok());
  EXPECT_EQ(budget.forced_grants(), 1u);
  EXPECT_EQ(budget.in_use(), 130u);
  EXPECT_FALSE(a_more.ready());
  b.Release(90);  // b's block is stored
  EXPECT_TRUE(a_more.f.get().ok());
  EXPECT_EQ(budget.in_use(), 70u);
}

TEST(ByteBudgetTest, ATenantWhoseLeasesAllWaitGoesOverItsShareWhereTheBudgetHasRoom) {
  ByteBudget budget(1000, 0.1);  // 100 per tenant
  BudgetLease a(&budget, "a"), b(&budget, "a"), other(&budget, "c");
  // Nothing of a's in use: one request larger than the share goes through alone.
  EXPECT_TRUE(a.Acquire(150, kLong, Never()));
  EXPECT_EQ(budget.forced_grants(), 1u);
  a.Release(100);
  EXPECT_TRUE(b.Acquire(40, kLong, Never()));  // a: 90
  Wait a_more, b_more;
  EXPECT_FALSE(a.Acquire(30, kLong, a_more.cb()));
  EXPECT_FALSE(b.Acquire(30, kLong, b_more.cb()));  // both of a's leases wait
  EXPECT_TRUE(a_more.f.get().ok());                 // a holds more (50 > 40)
  EXPECT_EQ(budget.forced_grants(), 2u);
  EXPECT_FALSE(b_more.ready());
  EXPECT_TRUE(other.Acquire(100, kLong, Never()));  // another tenant is unaffected
  a.Release(80);
  EXPECT_TRUE(b_more.f.get().ok());
}

TEST(CallWatchdogTest, FiresOnceAfterItsTimeUnlessDisarmed) {
  CallWatchdog w;
  const auto t0 = CallWatchdog::Clock::now();
  std::promise<CallWatchdog::Clock::time_point> fired;
  w.Arm(t0 + milliseconds(100), [&] { fired.set_value(CallWatchdog::Clock::now()); });
  std::atomic<int> never{0};
  const CallWatchdog::Handle h = w.Arm(t0 + milliseconds(50), [&] { ++never; });
  EXPECT_TRUE(static_cast<bool>(w.Disarm(h)));
  EXPECT_FALSE(static_cast<bool>(w.Disarm(h)));
  EXPECT_GE(fired.get_future().get() - t0, milliseconds(100));
  EXPECT_EQ(never.load(), 0);
  // A callable may arm again (a stream that is not idle yet looks again later).
  std::promise<int> second;
  std::atomic<int> rounds{0};
  std::function<void()> again = [&] {
    if (++rounds < 3) {
      w.Arm(CallWatchdog::Clock::now() + milliseconds(10), again);
    } else {
      second.set_value(rounds.load());
    }
  };
  w.Arm(CallWatchdog::Clock::now(), again);
  EXPECT_EQ(second.get_future().get(), 3);
  EXPECT_EQ(w.armed(), 0u);
}

}  // namespace
}  // namespace turbokv::server
