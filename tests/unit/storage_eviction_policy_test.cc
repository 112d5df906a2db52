// The eviction policies (server/storage/eviction_policy.h, lrfu_policy.h) on their own, without
// RocksDB: the contract every policy keeps (leaves first, a tenant filter, a predicate, no change
// from SelectVictims), LRFU's behaviour on small hand-made cases, and trace replays in-process
// (eviction_replay.h) that compare LRFU with LRU and Belady on the public Mooncake trace.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/storage/eviction_policy.h"
#include "server/storage/eviction_replay.h"
#include "server/storage/lrfu_policy.h"

namespace turbokv::server {
namespace {

std::unique_ptr<EvictionPolicy> Make(const std::string& name, uint64_t capacity) {
  auto p = MakeEvictionPolicy(name, capacity);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? std::move(*p) : nullptr;
}

// The charge of every block in these tests but the random forests' (SelectVictims' ChargeOf).
uint32_t ChargeOne(uint32_t /*slot*/) { return 1; }

RequestInfo Request(uint64_t n, bool last_in_call = false) {
  RequestInfo info;
  info.request = n;
  info.last_in_call = last_in_call;
  return info;
}

TEST(EvictionPolicyTest, UnknownNamesAreRefused) {
  auto p = MakeEvictionPolicy("fifo", 1000);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("lru, lrfu"), std::string::npos) << p.status();
}

class EveryPolicyTest : public ::testing::TestWithParam<std::string> {};

// Random forests of chains, random hits, erasures, tenants and predicates: whatever the policy
// lists, a block comes after all its live children, only evictable blocks of the asked tenant
// are listed, the list covers the bytes asked for when enough is evictable, and listing changes
// nothing (the same call twice gives the same list).
TEST_P(EveryPolicyTest, ListsLeavesFirstAndOnlyWhatMayGo) {
  std::mt19937_64 rng(7);
  auto policy = Make(GetParam(), 600);
  ASSERT_NE(policy, nullptr);
  absl::flat_hash_map<uint32_t, uint32_t> parent_of;  // live slot -> live parent (or kNoSlot)
  absl::flat_hash_map<uint32_t, uint32_t> tenant_of;
  absl::flat_hash_map<uint32_t, uint32_t> charges;
  std::vector<uint32_t> free_slots;
  for (uint32_t s = 0; s < 400; ++s) free_slots.push_back(399 - s);
  uint64_t request = 0;
  auto live = [&] {
    std::vector<uint32_t> v;
    for (const auto& [s, p] : parent_of) v.push_back(s);
    std::sort(v.begin(), v.end());
    return v;
  };
  auto erase = [&](uint32_t s) {
    policy->OnErase(s, s + 1000, charges[s], EraseReason::kEvicted);
    parent_of.erase(s);
    for (auto& [c, p] : parent_of) {
      if (p == s) p = kNoSlot;  // an orphan: its link went with its parent
    }
    free_slots.push_back(s);
  };
  for (int round = 0; round < 3000; ++round) {
    const int op = static_cast<int>(rng() % 10);
    std::vector<uint32_t> slots = live();
    if (op < 5 && !free_slots.empty()) {  // a chain of 1-4 blocks, under a live block or a root
      uint32_t parent = kNoSlot;
      if (!slots.empty() && rng() % 2 == 0) parent = slots[rng() % slots.size()];
      const uint32_t tenant = static_cast<uint32_t>(rng() % 3);
      const size_t n = 1 + rng() % 4;
      ++request;
      for (size_t i = 0; i < n && !free_slots.empty(); ++i) {
        const uint32_t s = free_slots.back();
        free_slots.pop_back();
        const uint32_t charge = 1 + static_cast<uint32_t>(rng() % 3);
        policy->OnInsert(s, parent, s + 1000, charge, tenant, Request(request, i + 1 == n));
        parent_of[s] = parent;
        tenant_of[s] = tenant;
        charges[s] = charge;
        parent = s;
      }
    } else if (op < 8 && !slots.empty()) {  // a hit along a block's chain, root first
      std::vector<uint32_t> path;
      for (uint32_t s = slots[rng() % slots.size()]; s != kNoSlot; s = parent_of[s]) {
        path.push_back(s);
      }
      ++request;
      uint32_t parent = kNoSlot;
      for (auto it = path.rbegin(); it != path.rend(); ++it) {
        policy->OnHit(*it, parent, *it + 1000, charges[*it], Request(request));
        parent = *it;
      }
    } else if (op == 8 && !slots.empty()) {  // a delete or expiry anywhere in a chain
      erase(slots[rng() % slots.size()]);
    } else if (!slots.empty()) {  // eviction with a predicate and maybe a tenant
      const uint64_t seed = rng();
      auto evictable = [seed](uint32_t s) { return ((s * 0x9E3779B9u) ^ seed) % 5 != 0; };
      std::optional<uint32_t> tenant;
      if (rng() % 3 == 0) tenant = static_cast<uint32_t>(rng() % 3);
      const uint64_t need = 1 + rng() % 20;
      std::vector<uint32_t> out, again;
      auto charge_of = [&charges](uint32_t s) { return charges.at(s); };
      const uint64_t listed = policy->SelectVictims(need, tenant, evictable, charge_of, &out);
      EXPECT_EQ(policy->SelectVictims(need, tenant, evictable, charge_of, &again), listed);
      EXPECT_EQ(out, again) << "SelectVictims changed the policy's state";
      absl::flat_hash_set<uint32_t> listed_so_far;
      uint64_t sum = 0;
      for (uint32_t s : out) {
        ASSERT_TRUE(parent_of.contains(s)) << "slot " << s << " is not live";
        EXPECT_TRUE(evictable(s));
        if (tenant.has_value()) {
          EXPECT_EQ(tenant_of[s], *tenant);
        }
        for (const auto& [c, p] : parent_of) {
          if (p == s) {
            EXPECT_TRUE(listed_so_far.contains(c)) << s << " before its child " << c;
          }
        }
        EXPECT_FALSE(listed_so_far.contains(s)) << "listed twice";
        listed_so_far.insert(s);
        sum += charges[s];
      }
      EXPECT_EQ(sum, listed);
      if (listed < need) {
        // Nothing else could go: every unlisted block is refused, of another tenant, or has an
        // unlisted child that keeps it.
        for (uint32_t s : slots) {
          if (listed_so_far.contains(s) || !evictable(s)) continue;
          if (tenant.has_value() && tenant_of[s] != *tenant) continue;
          bool has_unlisted_child = false;
          for (const auto& [c, p] : parent_of) {
            if (p == s && !listed_so_far.contains(c)) has_unlisted_child = true;
          }
          EXPECT_TRUE(has_unlisted_child) << "slot " << s << " could have gone";
        }
      }
      // Evict a prefix of the list, as the store may.
      const size_t take = out.empty() ? 0 : rng() % (out.size() + 1);
      for (size_t i = 0; i < take; ++i) erase(out[i]);
    }
    EXPECT_EQ(policy->blocks(), parent_of.size());
    uint64_t bytes = 0;
    for (const auto& [s, p] : parent_of) bytes += charges[s];
    EXPECT_EQ(policy->charged_bytes(), bytes);
  }
  EXPECT_GT(policy->MemoryBytes(), 0u);
}

INSTANTIATE_TEST_SUITE_P(Policies, EveryPolicyTest, ::testing::Values("lru", "lrfu"),
                         [](const auto& info) { return info.param; });

TEST(LrfuPolicyTest, AFrequentlyUsedBlockOutlivesABurstOfOneOffBlocks) {
  // A system prompt read by every 20th request, and one-off blocks in between: LRU forgets the
  // prompt whenever more one-offs than its capacity arrive between two uses, LRFU keeps it.
  constexpr uint64_t kCapacity = 16;
  std::vector<TraceRequest> trace;
  uint64_t next_id = 100;
  for (int i = 0; i < 400; ++i) {
    TraceRequest r;
    if (i % 20 == 0) {
      r.blocks = {1, 2, 3};
    } else {
      r.blocks = {next_id++};
    }
    trace.push_back(r);
  }
  ReplayOptions o;
  o.capacity_bytes = kCapacity;
  LruPolicy lru;
  LrfuOptions lo;
  lo.capacity_bytes = kCapacity;
  LrfuPolicy lrfu(lo);
  const ReplayResult a = Replay(trace, lru, o);
  const ReplayResult b = Replay(trace, lrfu, o);
  EXPECT_EQ(a.hit_blocks, 0u);       // 19 one-offs between uses > 16 blocks
  EXPECT_GE(b.hit_blocks, 3u * 10);  // the prompt hits on most of its 19 later uses (38 hits)
  const ReplayResult opt = ReplayBelady(trace, o);
  EXPECT_GE(opt.hit_blocks, b.hit_blocks);
}

TEST(LrfuPolicyTest, ARequestsLastBlockGoesBeforeItsChain) {
  // Two requests of one block chain each; the last block of a put call (the partly filled
  // block a conversation's next turn does not repeat) is the least valuable leaf.
  LrfuOptions lo;
  lo.capacity_bytes = 8;
  LrfuPolicy p(lo);
  p.OnInsert(0, kNoSlot, 1000, 1, 0, Request(1));
  p.OnInsert(1, 0, 1001, 1, 0, Request(1, /*last_in_call=*/true));
  p.OnInsert(2, kNoSlot, 1002, 1, 0, Request(2));
  p.OnInsert(3, 2, 1003, 1, 0, Request(2));
  std::vector<uint32_t> out;
  auto all = [](uint32_t) { return true; };
  p.SelectVictims(1, std::nullopt, all, ChargeOne, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], 1u);  // older request's last block, not request 2's (newer, not last)
}

TEST(LrfuPolicyTest, AnEvictedBlockThatComesBackResumesItsValue) {
  // Ghosts: a block evicted and stored again is worth what it was worth (decayed), so a block
  // used many times before comes back above a block seen once.
  LrfuOptions lo;
  lo.capacity_bytes = 4;
  LrfuPolicy p(lo);
  auto all = [](uint32_t) { return true; };
  p.OnInsert(0, kNoSlot, 5000, 1, 0, Request(1));
  for (uint64_t r = 2; r < 10; ++r) p.OnHit(0, kNoSlot, 5000, 1, Request(r));
  p.OnErase(0, 5000, 1, EraseReason::kEvicted);
  p.OnInsert(1, kNoSlot, 6000, 1, 0, Request(10));  // seen once
  p.OnInsert(0, kNoSlot, 5000, 1, 0, Request(11));  // back: 9 uses before
  std::vector<uint32_t> out;
  p.SelectVictims(1, std::nullopt, all, ChargeOne, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], 1u);
}

// The ghost-code tests' policy: one half-life, H = 4 turnovers of a 4-block capacity (16
// accesses), so ghost codes come in steps of 4 accesses and the reference moves every 32; no
// unseen age.
LrfuOptions OneLongHalfLife() {
  LrfuOptions lo;
  lo.capacity_bytes = 4;
  lo.half_lives = {4};
  lo.initial_half_life = 4;
  lo.max_unseen_age = 0;
  return lo;
}

// `accesses` accesses of blocks that leave no ghost (stored in slot 2, then deleted), with
// request numbers from *request and fingerprints from *fingerprint.
void AccessesWithoutGhosts(LrfuPolicy& p, int accesses, uint64_t* request, uint64_t* fingerprint) {
  for (int i = 0; i < accesses; ++i) {
    p.OnInsert(2, kNoSlot, *fingerprint, 1, 0, Request((*request)++));
    p.OnErase(2, (*fingerprint)++, 1, EraseReason::kDeleted);
  }
}

// A ghost's key is a 5-bit code against a reference that follows the clock in steps of a quarter
// half-life: the code shifts with it, so a block used often and evicted still comes back above
// one used twice, evicted at the same time, after the reference has moved on.
TEST(LrfuPolicyTest, AGhostKeepsItsValueWhileTheClockMovesOn) {
  LrfuPolicy p(OneLongHalfLife());
  uint64_t r = 1;
  uint64_t filler = 7000;
  p.OnInsert(0, kNoSlot, 5000, 1, 0, Request(r++));
  for (int i = 0; i < 8; ++i) p.OnHit(0, kNoSlot, 5000, 1, Request(r++));  // used often
  p.OnInsert(1, kNoSlot, 6000, 1, 0, Request(r++));
  p.OnHit(1, kNoSlot, 6000, 1, Request(r++));  // used twice
  p.OnErase(0, 5000, 1, EraseReason::kEvicted);
  p.OnErase(1, 6000, 1, EraseReason::kEvicted);
  AccessesWithoutGhosts(p, 48, &r, &filler);
  p.OnInsert(0, kNoSlot, 5000, 1, 0, Request(r++));  // back first
  p.OnInsert(1, kNoSlot, 6000, 1, 0, Request(r++));  // back after: the more recent
  std::vector<uint32_t> out;
  p.SelectVictims(
      1, std::nullopt, [](uint32_t) { return true; }, ChargeOne, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], 1u);  // with the history lost, the older arrival (0) would go
}

// When the reference moves (every 8 steps: 32 accesses here), every code shifts with it: a ghost
// put just before the move is not revived as if it were 8 steps younger than it is.
TEST(LrfuPolicyTest, GhostCodesShiftWithTheReference) {
  LrfuPolicy p(OneLongHalfLife());
  uint64_t r = 1;
  uint64_t filler = 7000;
  auto use_twice_and_evict = [&](uint32_t slot, uint64_t fingerprint) {
    p.OnInsert(slot, kNoSlot, fingerprint, 1, 0, Request(r++));
    p.OnHit(slot, kNoSlot, fingerprint, 1, Request(r++));
    p.OnErase(slot, fingerprint, 1, EraseReason::kEvicted);
  };
  AccessesWithoutGhosts(p, 27, &r, &filler);
  use_twice_and_evict(0, 5000);              // accesses 28-29
  AccessesWithoutGhosts(p, 6, &r, &filler);  // the reference moves at about 33
  use_twice_and_evict(1, 6000);              // accesses 36-37: as valuable, 8 accesses later
  p.OnInsert(0, kNoSlot, 5000, 1, 0, Request(r++));
  p.OnInsert(1, kNoSlot, 6000, 1, 0, Request(r++));
  std::vector<uint32_t> out;
  p.SelectVictims(
      1, std::nullopt, [](uint32_t) { return true; }, ChargeOne, &out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], 0u);
}

// Stores, uses and evicts the block `fingerprint` in `slot`, then stores it again: a ghost of a
// block evicted after a use comes back.
void UseEvictAndStoreAgain(LrfuPolicy& p, uint32_t slot, uint64_t fingerprint, uint64_t* request) {
  p.OnInsert(slot, kNoSlot, fingerprint, 1, 0, Request((*request)++));
  p.OnHit(slot, kNoSlot, fingerprint, 1, Request((*request)++));
  p.OnErase(slot, fingerprint, 1, EraseReason::kEvicted);
  p.OnInsert(slot, kNoSlot, fingerprint, 1, 0, Request((*request)++));
}

TEST(LrfuPolicyTest, TheUnseenAgeAdaptsToWhichGhostsComeBack) {
  // ARC's rule: a block evicted after a use that comes back raises the age by a step
  // (unseen_age_step / capacity in blocks: 1/4 turnover here, times the ratio of the other kind's
  // ghosts to this kind's, at least 1); one evicted unused lowers it. It stays within
  // [0, max_unseen_age].
  LrfuOptions lo;
  lo.capacity_bytes = 4;
  lo.max_unseen_age = 0.6;
  LrfuPolicy p(lo);
  EXPECT_EQ(p.unseen_age(), 0.0);
  uint64_t request = 1;
  UseEvictAndStoreAgain(p, 0, 100, &request);
  EXPECT_DOUBLE_EQ(p.unseen_age(), 0.25);
  p.OnErase(0, 100, 1, EraseReason::kDeleted);  // no ghost
  UseEvictAndStoreAgain(p, 0, 101, &request);
  UseEvictAndStoreAgain(p, 1, 102, &request);
  EXPECT_DOUBLE_EQ(p.unseen_age(), 0.6);  // 0.75, capped
  // Unused: stored with no ghost, evicted, back.
  p.OnInsert(2, kNoSlot, 200, 1, 0, Request(request++));
  p.OnErase(2, 200, 1, EraseReason::kEvicted);
  p.OnInsert(2, kNoSlot, 200, 1, 0, Request(request++));
  EXPECT_DOUBLE_EQ(p.unseen_age(), 0.35);
  // A put call's last block has a rule of its own: its ghost changes nothing.
  p.OnInsert(3, kNoSlot, 300, 1, 0, Request(request++, /*last_in_call=*/true));
  p.OnErase(3, 300, 1, EraseReason::kEvicted);
  p.OnInsert(3, kNoSlot, 300, 1, 0, Request(request++));
  EXPECT_DOUBLE_EQ(p.unseen_age(), 0.35);

  LrfuOptions off = lo;
  off.max_unseen_age = 0;
  LrfuPolicy q(off);
  request = 1;
  UseEvictAndStoreAgain(q, 0, 100, &request);
  EXPECT_EQ(q.unseen_age(), 0.0);
}

TEST(LrfuPolicyTest, FollowsAnotherNodesTuningThenTunesItselfAgain) {
  // 64 blocks of capacity, half-lives 0 (LRU's order) and 16 turnovers. A loop over 48 blocks
  // after 32 blocks were used 20 times each: with H = 16 the old blocks' counts keep half the
  // capacity and the loop misses; with H = 0 the loop fits, so the policy's shadows choose 0.
  LrfuOptions lo;
  lo.capacity_bytes = 64;
  lo.half_lives = {0, 16};
  lo.initial_half_life = 0;
  LrfuPolicy p(lo);
  ASSERT_TRUE(p.tuning().has_value());
  EXPECT_EQ(p.tuning()->half_life, 0.0);
  EXPECT_EQ(p.tuning()->unseen_age, 0.0);
  absl::flat_hash_map<uint64_t, uint32_t> slot_of;
  std::vector<uint64_t> id_of;
  uint64_t request = 1;
  auto access = [&](uint64_t id) {
    if (auto it = slot_of.find(id); it != slot_of.end()) {
      p.OnHit(it->second, kNoSlot, id, 1, Request(request++));
      return;
    }
    if (p.charged_bytes() + 1 > lo.capacity_bytes) {
      std::vector<uint32_t> out;
      p.SelectVictims(
          1, std::nullopt, [](uint32_t) { return true; }, ChargeOne, &out);
      for (uint32_t v : out) {
        p.OnErase(v, id_of[v], 1, EraseReason::kEvicted);
        slot_of.erase(id_of[v]);
        slot_of.emplace(id, v);
        id_of[v] = id;
        p.OnInsert(v, kNoSlot, id, 1, 0, Request(request++));
        return;
      }
    }
    const auto slot = static_cast<uint32_t>(id_of.size());
    id_of.push_back(id);
    slot_of.emplace(id, slot);
    p.OnInsert(slot, kNoSlot, id, 1, 0, Request(request++));
  };
  for (int round = 0; round < 20; ++round) {
    for (uint64_t id = 1; id <= 32; ++id) access(id);
  }
  p.FollowTuning({16, 0.5});
  EXPECT_EQ(p.tuning()->half_life, 16.0);
  EXPECT_EQ(p.tuning()->unseen_age, 0.5);
  const uint64_t changes = p.half_life_changes();
  // Four epochs of 256 accesses with no decision of its own: the loop runs at H = 16.
  for (int i = 0; i < 1000; ++i) access(1000 + i % 48);
  EXPECT_EQ(p.half_life(), 16.0);
  EXPECT_EQ(p.half_life_changes(), changes);
  // Then its own shadows take it back to 0.
  for (int i = 0; i < 3000; ++i) access(1000 + i % 48);
  EXPECT_EQ(p.half_life(), 0.0);
  EXPECT_GT(p.half_life_changes(), changes);

  // A half-life that is not a candidate is ignored, the age clamped (a NaN age ignored).
  p.FollowTuning({3, 7});
  EXPECT_EQ(p.tuning()->half_life, 0.0);
  EXPECT_EQ(p.tuning()->unseen_age, lo.max_unseen_age);
  p.FollowTuning({16, std::nan("")});
  EXPECT_EQ(p.tuning()->half_life, 16.0);
  EXPECT_EQ(p.tuning()->unseen_age, lo.max_unseen_age);
  p.FollowTuning({0, -1});
  EXPECT_EQ(p.tuning()->unseen_age, 0.0);

  // LRU has no tuning to share or follow.
  LruPolicy lru;
  EXPECT_FALSE(lru.tuning().has_value());
  lru.FollowTuning({16, 0.5});
  EXPECT_FALSE(lru.tuning().has_value());
}

TEST(LrfuPolicyTest, ABlockSeenOnceGoesBeforeOlderBlocksThatCameBack) {
  // At H = 0 (LRU's order) with an unseen age of 1/2 turnover (two blocks that came back after
  // a use), a block stored for the first time ranks as if stored 2 accesses ago: below the
  // block that came back one access before it. With the age off, LRU's order.
  for (const double max_age : {0.0, 1.0}) {
    LrfuOptions lo;
    lo.capacity_bytes = 4;
    lo.half_lives = {0};
    lo.initial_half_life = 0;
    lo.max_unseen_age = max_age;
    LrfuPolicy p(lo);
    uint64_t request = 1;
    UseEvictAndStoreAgain(p, 0, 100, &request);
    p.OnHit(0, kNoSlot, 100, 1, Request(request++));
    p.OnErase(0, 100, 1, EraseReason::kEvicted);
    p.OnInsert(0, kNoSlot, 100, 1, 0, Request(request++));
    EXPECT_DOUBLE_EQ(p.unseen_age(), max_age / 2);
    p.OnInsert(1, kNoSlot, 999, 1, 0, Request(request++));  // seen for the first time
    std::vector<uint32_t> out;
    p.SelectVictims(
        1, std::nullopt, [](uint32_t) { return true; }, ChargeOne, &out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0], max_age > 0 ? 1u : 0u) << max_age;
  }
}

TEST(LrfuPolicyTest, ReserveSizesThePerSlotArraysOnce) {
  // A store's recovery inserts every block at once: Reserve keeps the arrays at their size
  // instead of the next power of two (24-byte node and 4-byte heap entry per slot).
  constexpr uint32_t kSlots = 100000;
  LrfuOptions lo;
  lo.ghost_ratio = 0;
  LrfuPolicy grown(lo), reserved(lo);
  reserved.Reserve(kSlots);
  for (uint32_t s = 0; s < kSlots; ++s) {
    grown.OnInsert(s, kNoSlot, s + 1, 1, 0, Request(s + 1));
    reserved.OnInsert(s, kNoSlot, s + 1, 1, 0, Request(s + 1));
  }
  EXPECT_LT(reserved.MemoryBytes(), grown.MemoryBytes());
  EXPECT_LE(reserved.MemoryBytes(), size_t{kSlots} * 28 + (size_t{8} << 20));  // + shadows
  // Same ranking either way.
  auto all = [](uint32_t) { return true; };
  std::vector<uint32_t> a, b;
  grown.SelectVictims(100, std::nullopt, all, ChargeOne, &a);
  reserved.SelectVictims(100, std::nullopt, all, ChargeOne, &b);
  EXPECT_EQ(a, b);
}

TEST(GhostTableTest, CountsItsGhosts) {
  lrfu::GhostTable g;
  EXPECT_FALSE(g.Take(lrfu::Mix64(1)).has_value());                    // no table yet
  EXPECT_EQ(g.Put(lrfu::Mix64(1), 1.0f), std::optional<float>(1.0f));  // nowhere to keep it
  g.Resize(64);
  EXPECT_EQ(g.size(), 0u);
  EXPECT_FALSE(g.Take(lrfu::Mix64(1)).has_value());
  for (uint64_t f = 1; f <= 20; ++f) {
    EXPECT_FALSE(g.Put(lrfu::Mix64(f), static_cast<float>(f)).has_value());  // room for 64
  }
  const std::optional<float> lost = g.Put(lrfu::Mix64(3), 30.0f);  // the same ghost again
  EXPECT_EQ(g.size(), 20u);
  ASSERT_TRUE(lost.has_value());
  EXPECT_EQ(*lost, 3.0f);  // the older one
  ASSERT_TRUE(g.Take(lrfu::Mix64(3)).has_value());
  EXPECT_FALSE(g.Take(lrfu::Mix64(3)).has_value());
  EXPECT_EQ(g.size(), 19u);
  g.DropAtOrAbove(0);  // every tag is >= 0... and != 0: all dropped
  EXPECT_EQ(g.size(), 0u);
  EXPECT_FALSE(g.Take(lrfu::Mix64(5)).has_value());
  g.Put(lrfu::Mix64(7), 1.0f);
  EXPECT_EQ(g.size(), 1u);
  g.Resize(128);
  EXPECT_EQ(g.size(), 0u);
}

// The policy's table: 2.5 bytes a ghost (a 13-bit tag, a 2-bit class, a 5-bit key code), any size
// (no power-of-two rounding).
TEST(GhostTableTest, TheCompactTableIsSizedExactly) {
  lrfu::CompactGhostTable g;
  EXPECT_EQ(g.Put(lrfu::Mix64(1), {2, 5}), std::optional<uint32_t>(2));  // nowhere to keep it
  g.Resize(1000);
  EXPECT_EQ(g.capacity(), 1000u);
  EXPECT_EQ(g.MemoryBytes(), 2500u);
  g.Resize(1001);  // whole buckets of 8
  EXPECT_EQ(g.capacity(), 1008u);
  for (uint64_t f = 1; f <= 500; ++f) {
    g.Put(lrfu::Mix64(f), {static_cast<uint32_t>(f % 3), static_cast<uint32_t>(f % 32)});
  }
  const size_t held = g.size();
  size_t found = 0;
  for (uint64_t f = 1; f <= 500; ++f) {
    const std::optional<lrfu::CompactGhostTable::Ghost> k = g.Take(lrfu::Mix64(f));
    if (k.has_value()) {
      EXPECT_EQ(k->ghost_class, f % 3);
      EXPECT_EQ(k->code, f % 32);
      ++found;
    }
  }
  // Half full: a bucket overflows rarely (Poisson, mean 4 of 8 ways).
  EXPECT_GE(found, 490u);
  EXPECT_EQ(found, held);
  EXPECT_EQ(g.size(), 0u);
}

// A full bucket drops its oldest ghost of the lowest class, or the new ghost when its class is
// lower still; a ghost put again replaces its older self; TransformCodes re-codes every ghost.
TEST(GhostTableTest, AFullBucketDropsItsOldestGhostOfTheLowestClass) {
  lrfu::CompactGhostTable g;
  g.Resize(8);  // one bucket
  const uint32_t classes[8] = {2, 1, 0, 2, 1, 0, 2, 2};
  for (uint64_t f = 0; f < 8; ++f) {
    EXPECT_FALSE(g.Put(lrfu::Mix64(f), {classes[f], static_cast<uint32_t>(f)}).has_value());
  }
  EXPECT_EQ(g.size(), 8u);
  // Class 1 in: the oldest class-0 ghost (f = 2) goes.
  EXPECT_EQ(g.Put(lrfu::Mix64(8), {1, 8}), std::optional<uint32_t>(0));
  EXPECT_FALSE(g.Take(lrfu::Mix64(2)).has_value());
  EXPECT_TRUE(g.Take(lrfu::Mix64(5)).has_value());  // the younger class-0 ghost stayed
  g.Put(lrfu::Mix64(9), {2, 9});                    // fills the room Take made
  // Now no class 0 is left: a class-0 ghost is the one dropped, and the bucket is unchanged.
  EXPECT_EQ(g.Put(lrfu::Mix64(10), {0, 10}), std::optional<uint32_t>(0));
  EXPECT_FALSE(g.Take(lrfu::Mix64(10)).has_value());
  EXPECT_EQ(g.size(), 8u);
  // The same ghost again: its older self is what is lost.
  EXPECT_EQ(g.Put(lrfu::Mix64(0), {1, 3}), std::optional<uint32_t>(2));
  EXPECT_EQ(g.size(), 8u);
  g.TransformCodes([](uint32_t c) { return 31 - c; });
  const std::optional<lrfu::CompactGhostTable::Ghost> back = g.Take(lrfu::Mix64(0));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->ghost_class, 1u);
  EXPECT_EQ(back->code, 28u);
  const std::optional<lrfu::CompactGhostTable::Ghost> other = g.Take(lrfu::Mix64(6));
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->code, 25u);
}

// -- replays of the public Mooncake trace (../shared/data/traces), skipped without it ----------

std::vector<TraceRequest> LoadMooncake() {
  const std::filesystem::path path = std::filesystem::path(TURBOKV_SOURCE_DIR) / ".." / "shared" /
                                     "data" / "traces" / "mooncake_synthetic_trace.jsonl";
  std::vector<TraceRequest> trace;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.contains("hash_ids")) continue;
    TraceRequest r;
    r.timestamp_ms = j.value("timestamp", int64_t{0});
    for (const auto& id : j["hash_ids"]) r.blocks.push_back(id.get<uint64_t>());
    trace.push_back(std::move(r));
  }
  return trace;
}

TEST(EvictionReplayTest, LrfuHitsAtLeastAsOftenAsLruOnTheMooncakeTrace) {
  const std::vector<TraceRequest> trace = LoadMooncake();
  if (trace.empty()) GTEST_SKIP() << "../shared/data/traces/mooncake_synthetic_trace.jsonl absent";
  const size_t distinct = DistinctBlocks(trace);
  ASSERT_EQ(distinct, 43924u);
  const double infinite = InfiniteCacheHitRatio(trace);
  for (double percent : {5.0, 10.0, 25.0, 50.0}) {
    ReplayOptions o;
    o.capacity_bytes = static_cast<uint64_t>(percent / 100 * static_cast<double>(distinct));
    LruPolicy lru;
    LrfuOptions lo;
    lo.capacity_bytes = o.capacity_bytes;
    LrfuPolicy lrfu(lo);
    const ReplayResult a = Replay(trace, lru, o);
    const ReplayResult b = Replay(trace, lrfu, o);
    const ReplayResult opt = ReplayBelady(trace, o);
    std::printf("capacity %4.1f%%: LRU %.4f  LRFU %.4f  Belady %.4f  infinite %.4f\n", percent,
                a.hit_ratio(), b.hit_ratio(), opt.hit_ratio(), infinite);
    EXPECT_GE(b.hit_blocks, a.hit_blocks) << percent << "%";
    EXPECT_GE(opt.hit_blocks, b.hit_blocks) << percent << "%";
    EXPECT_LE(opt.hit_ratio(), infinite + 1e-12);
    EXPECT_EQ(b.referenced_blocks, a.referenced_blocks);
  }
}

}  // namespace
}  // namespace turbokv::server
