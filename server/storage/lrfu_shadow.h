// Building blocks of LrfuPolicy (lrfu_policy.h): the LRFU key arithmetic, a table of ghost
// keys (evicted blocks' values), and a sampled shadow cache that simulates one half-life.
//
// Not thread-safe; owned by one LrfuPolicy.
#ifndef TURBOKV_SERVER_STORAGE_LRFU_SHADOW_H_
#define TURBOKV_SERVER_STORAGE_LRFU_SHADOW_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace turbokv::server::lrfu {

// splitmix64's finalizer: spreads any 64-bit fingerprint over all bits.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// LRFU (D. Lee et al., "LRFU: A Spectrum of Policies that Subsumes the Least Recently Used and
// Least Frequently Used Policies", IEEE Trans. Computers 50(12), 2001) with the weighing
// function F(x) = 2^(-x/H): a block's value at time t is C(t) = sum over its accesses t_i of
// 2^(-(t - t_i)/H). Kept as one number, the key k = t_a + H * log2(C(t_a)) after its last access
// t_a: C(t) = 2^((k - t)/H) at any later t, so the order of keys is the order of values at every
// time, and a heap ordered once stays ordered. H -> 0 is LRU, H -> infinity LFU.
//
// The key of a block accessed now, `key` its key before (a block never seen: C = 0, pass
// -infinity).
inline double KeyAfterAccess(double key, double now, double half_life) {
  if (!std::isfinite(key)) return now;
  // log2(2^d + 1) without overflow or cancellation: max(d, 0) + log2(1 + 2^-|d|).
  const double d = (key - now) / half_life;
  return now + half_life * (std::max(d, 0.0) + std::log2(1.0 + std::exp2(-std::abs(d))));
}

// The key the same value has under another half-life: k' = now + (H'/H) (k - now). Monotone, so
// a heap stays a heap.
inline double RescaleKey(double key, double now, double from_half_life, double to_half_life) {
  return now + (to_half_life / from_half_life) * (key - now);
}

// A binary min-heap of slot numbers that tells each slot its position (so that a slot can be
// removed or re-keyed in O(log n)): `key_of(slot)` orders it, `set_pos(slot, pos)` records
// where a slot now is. Used by LrfuPolicy's heap of leaves and by ShadowCache.
template <typename KeyOf, typename SetPos>
void HeapSiftUp(std::vector<uint32_t>& heap, size_t pos, KeyOf key_of, SetPos set_pos) {
  const uint32_t s = heap[pos];
  const auto key = key_of(s);
  while (pos > 0) {
    const size_t up = (pos - 1) / 2;
    if (!(key < key_of(heap[up]))) break;
    heap[pos] = heap[up];
    set_pos(heap[pos], static_cast<uint32_t>(pos));
    pos = up;
  }
  heap[pos] = s;
  set_pos(s, static_cast<uint32_t>(pos));
}
template <typename KeyOf, typename SetPos>
void HeapSiftDown(std::vector<uint32_t>& heap, size_t pos, KeyOf key_of, SetPos set_pos) {
  const uint32_t s = heap[pos];
  const auto key = key_of(s);
  const size_t n = heap.size();
  while (true) {
    size_t child = 2 * pos + 1;
    if (child >= n) break;
    if (child + 1 < n && key_of(heap[child + 1]) < key_of(heap[child])) ++child;
    if (!(key_of(heap[child]) < key)) break;
    heap[pos] = heap[child];
    set_pos(heap[pos], static_cast<uint32_t>(pos));
    pos = child;
  }
  heap[pos] = s;
  set_pos(s, static_cast<uint32_t>(pos));
}

// The bucket array of a set-associative ghost table: buckets of kGhostWays entries, any count of
// them (no power-of-two rounding). A fingerprint's bucket is its mixed low 32 bits mapped onto
// the count by a multiply (Lemire's fast range reduction), so at most 2^32 buckets.
inline constexpr size_t kGhostWays = 8;
template <typename Bucket>
class GhostBuckets {
 public:
  // Room for `entries` ghosts (rounded up to whole buckets); every bucket empty.
  void Resize(size_t entries) {
    buckets_.assign(std::min<size_t>((entries + kGhostWays - 1) / kGhostWays, size_t{1} << 32),
                    Bucket{});
    buckets_.shrink_to_fit();
  }
  bool empty() const { return buckets_.empty(); }
  size_t capacity() const { return buckets_.size() * kGhostWays; }  // entries
  size_t MemoryBytes() const { return buckets_.capacity() * sizeof(Bucket); }
  // `mixed`: Mix64 of the fingerprint; not for an empty array.
  Bucket& Of(uint64_t mixed) {
    return buckets_[static_cast<size_t>(((mixed & 0xffffffffu) * buckets_.size()) >> 32)];
  }
  typename std::vector<Bucket>::iterator begin() { return buckets_.begin(); }
  typename std::vector<Bucket>::iterator end() { return buckets_.end(); }

 private:
  std::vector<Bucket> buckets_;
};

// Keys of recently evicted blocks, by fingerprint: a block stored again resumes the value it
// had (decayed since) instead of starting from nothing. Set-associative, buckets of 8 entries
// (a tag of the fingerprint's mixed high bits, TagT wide, and the key relative to the owner's
// base: 6 bytes an entry with 16-bit tags, 8 with 32-bit ones); a full bucket drops its least
// valuable entry. A tag collision (about 8 in 2^(8 x sizeof(TagT)) lookups of an absent
// fingerprint) revives a wrong key. Any number of buckets (GhostBuckets).
template <typename TagT>
class BasicGhostTable {
 public:
  // Room for `entries` ghosts (rounded up to whole buckets of kWays); drops all.
  void Resize(size_t entries) {
    buckets_.Resize(entries);
    size_ = 0;
  }
  size_t capacity() const { return buckets_.capacity(); }
  size_t size() const { return size_; }  // ghosts held
  // `mixed`: Mix64 of the fingerprint. Returns the key of the ghost the table no longer holds
  // because of this Put: the one it replaced (an older ghost of the same tag, or a full bucket's
  // least valuable), or this one when the bucket kept its more valuable ghosts; nullopt when
  // nothing was lost.
  std::optional<float> Put(uint64_t mixed, float key) {
    if (buckets_.empty()) return key;
    const TagT tag = Tag(mixed);
    Bucket& b = buckets_.Of(mixed);
    size_t victim = kWays;
    for (size_t i = 0; i < kWays; ++i) {
      if (b.tags[i] == tag || b.tags[i] == 0) {
        victim = i;
        break;
      }
      if (victim == kWays || b.keys[i] < b.keys[victim]) victim = i;
    }
    // A full bucket keeps its more valuable ghosts.
    if (b.tags[victim] != 0 && b.tags[victim] != tag && b.keys[victim] > key) return key;
    std::optional<float> lost;
    if (b.tags[victim] == 0) {
      ++size_;
    } else {
      lost = b.keys[victim];
    }
    b.tags[victim] = tag;
    b.keys[victim] = key;
    return lost;
  }
  // The ghost's key, removed; nullopt when none.
  std::optional<float> Take(uint64_t mixed) {
    if (size_ == 0) return std::nullopt;  // a store's recovery inserts millions with no ghost
    const TagT tag = Tag(mixed);
    Bucket& b = buckets_.Of(mixed);
    for (size_t i = 0; i < kWays; ++i) {
      if (b.tags[i] == tag) {
        b.tags[i] = 0;
        --size_;
        return b.keys[i];
      }
    }
    return std::nullopt;
  }
  // Applies key = fn(key) to every ghost (fn monotone: rebasing, rescaling).
  template <typename Fn>
  void TransformKeys(Fn fn) {
    for (Bucket& b : buckets_) {
      for (size_t i = 0; i < kWays; ++i) {
        if (b.tags[i] != 0) b.keys[i] = fn(b.keys[i]);
      }
    }
  }
  // Drops ghosts whose sampling hash (the fingerprint's mixed high 32 bits) is >= threshold
  // (32-bit tags only: they are that hash).
  void DropAtOrAbove(uint32_t threshold) {
    static_assert(sizeof(TagT) == 4, "DropAtOrAbove needs the whole 32-bit sampling hash");
    for (Bucket& b : buckets_) {
      for (size_t i = 0; i < kWays; ++i) {
        if (b.tags[i] != 0 && b.tags[i] >= threshold) {
          b.tags[i] = 0;
          --size_;
        }
      }
    }
  }
  size_t MemoryBytes() const { return buckets_.MemoryBytes(); }

 private:
  static constexpr size_t kWays = kGhostWays;
  struct Bucket {
    TagT tags[kWays] = {};  // 0 = empty
    float keys[kWays] = {};
  };
  static TagT Tag(uint64_t mixed) {
    const auto t = static_cast<TagT>(mixed >> (64 - 8 * sizeof(TagT)));
    return t == 0 ? TagT{1} : t;
  }

  GhostBuckets<Bucket> buckets_;
  size_t size_ = 0;  // entries with a tag: Take skips the probe (a cache miss) when 0
};
// The shadows' ghosts (DropAtOrAbove needs whole 32-bit tags).
using GhostTable = BasicGhostTable<uint32_t>;

// The policy's ghosts, 2.5 bytes each: which blocks were evicted lately, a 2-bit class of each
// (what the block was when evicted; LrfuPolicy's GhostClass) and a 5-bit code of its key (the
// owner's quantization: LrfuPolicy keeps a reference and a step). Set-associative, buckets of 8
// entries kept newest first: a 16-bit word per entry (a 13-bit tag of the fingerprint's mixed
// high bits, the class, the code's high bit) and a nibble (the code's low bits). A full bucket
// drops its oldest ghost of the lowest class, or the new ghost when its class is lower still
// (the ghosts of blocks used before are the ones that come back). A tag collision (about 8 in
// 2^13 lookups of an absent fingerprint) reports a ghost that is not there. Any number of buckets
// (GhostBuckets).
class CompactGhostTable {
 public:
  static constexpr uint32_t kCodes = 32;  // codes are 0..31

  struct Ghost {
    uint32_t ghost_class;  // 0..3
    uint32_t code;         // 0..31
  };

  // Room for `entries` ghosts (rounded up to whole buckets of kWays); drops all.
  void Resize(size_t entries) {
    buckets_.Resize(entries);
    size_ = 0;
  }
  size_t capacity() const { return buckets_.capacity(); }
  size_t size() const { return size_; }  // ghosts held
  // Adds `ghost` for `mixed` (Mix64 of the fingerprint) as the newest of its bucket. Returns the
  // class of the ghost the table no longer holds because of this Put (an older ghost of the same
  // tag, a full bucket's oldest of its lowest class, or this one's), or nullopt when nothing was
  // lost.
  std::optional<uint32_t> Put(uint64_t mixed, Ghost ghost) {
    if (buckets_.empty()) return ghost.ghost_class;
    const uint16_t tag = Tag(mixed);
    Bucket& b = buckets_.Of(mixed);
    size_t slot = kWays;  // the entry the shift below overwrites
    for (size_t i = 0; i < kWays; ++i) {
      if (b.words[i] == 0 || (b.words[i] >> 3) == tag) {
        slot = i;
        break;
      }
    }
    if (slot == kWays) {
      slot = kWays - 1;
      for (size_t i = kWays - 1; i-- > 0;) {
        if (ClassOf(b.words[i]) < ClassOf(b.words[slot])) slot = i;
      }
      if (ghost.ghost_class < ClassOf(b.words[slot])) return ghost.ghost_class;
    }
    std::optional<uint32_t> lost;
    if (b.words[slot] == 0) {
      ++size_;
    } else {
      lost = ClassOf(b.words[slot]);
    }
    for (size_t i = slot; i > 0; --i) {
      b.words[i] = b.words[i - 1];
      b.SetCode(i, b.Code(i - 1));
    }
    b.words[0] = static_cast<uint16_t>((tag << 3) | ((ghost.ghost_class & 3u) << 1));
    b.SetCode(0, ghost.code);
    return lost;
  }
  // The ghost of `mixed`, removed; nullopt when none.
  std::optional<Ghost> Take(uint64_t mixed) {
    if (size_ == 0) return std::nullopt;  // a store's recovery inserts millions with no ghost
    const uint16_t tag = Tag(mixed);
    Bucket& b = buckets_.Of(mixed);
    for (size_t i = 0; i < kWays && b.words[i] != 0; ++i) {
      if ((b.words[i] >> 3) != tag) continue;
      const Ghost ghost{ClassOf(b.words[i]), b.Code(i)};
      for (size_t j = i; j + 1 < kWays; ++j) {
        b.words[j] = b.words[j + 1];
        b.SetCode(j, b.Code(j + 1));
      }
      b.words[kWays - 1] = 0;
      b.SetCode(kWays - 1, 0);
      --size_;
      return ghost;
    }
    return std::nullopt;
  }
  // Applies code = fn(code) to every ghost (fn: 0..31 -> 0..31; the owner's new quantization).
  template <typename Fn>
  void TransformCodes(Fn fn) {
    for (Bucket& b : buckets_) {
      for (size_t i = 0; i < kWays && b.words[i] != 0; ++i) b.SetCode(i, fn(b.Code(i)));
    }
  }
  size_t MemoryBytes() const { return buckets_.MemoryBytes(); }

 private:
  static constexpr size_t kWays = kGhostWays;
  struct Bucket {
    // tag << 3 | class << 1 | the code's bit 4, newest first; 0 = empty (tags are >= 1).
    uint16_t words[kWays] = {};
    uint8_t codes[kWays / 2] = {};  // entry i's code bits 0..3: nibble i % 2 of codes[i / 2]
    uint32_t Code(size_t i) const {
      return ((words[i] & 1u) << 4) | ((codes[i / 2] >> (4 * (i % 2))) & 0xfu);
    }
    void SetCode(size_t i, uint32_t code) {
      words[i] = static_cast<uint16_t>((words[i] & ~1u) | ((code >> 4) & 1u));
      const unsigned shift = 4 * (i % 2);
      codes[i / 2] =
          static_cast<uint8_t>((codes[i / 2] & ~(0xfu << shift)) | ((code & 0xfu) << shift));
    }
  };
  static_assert(sizeof(Bucket) == 20);
  static uint16_t Tag(uint64_t mixed) {
    const auto t = static_cast<uint16_t>(mixed >> 51);  // 13 bits
    return t == 0 ? uint16_t{1} : t;
  }
  static uint32_t ClassOf(uint16_t word) { return (word >> 1) & 3u; }

  GhostBuckets<Bucket> buckets_;
  size_t size_ = 0;  // entries with a tag: Take skips the probe (a cache miss) when 0
};

// A cache simulated on a sample of the blocks (those whose mixed fingerprint's high 32 bits fall
// below the sampling threshold), with its capacity scaled by the sampling rate, running LRFU at
// one half-life (SHARDS-style spatial sampling: C. Waldspurger et al., FAST'15). Prefix
// semantics are approximated within each request: once a sampled block of a request misses,
// the request's later sampled blocks are not counted as hits (the real cache would have
// matched nothing past the miss). No tree: evicts the least valuable block.
class ShadowCache {
 public:
  // `half_life`: in turnovers of this cache (H = half_life * its capacity in blocks; 0: LRU).
  // `ghost_ratio`: ghost entries per block of its capacity.
  ShadowCache(double half_life, double ghost_ratio)
      : half_life_(half_life), ghost_ratio_(ghost_ratio) {}

  // One access (a hit, or a put) of a sampled block. `capacity_bytes` and `capacity_blocks`:
  // this cache's scaled capacity now. Adds one to the score for a hit.
  void Access(uint64_t mixed, uint64_t request, bool last_in_call, uint32_t charge,
              uint64_t capacity_bytes, double capacity_blocks);
  // Forgets blocks and ghosts no longer sampled after the threshold was lowered.
  void DropAtOrAbove(uint32_t threshold);
  // Multiplies the score by `factor` (exponential forgetting of old hits).
  void DecayScore(double factor) { score_ *= factor; }

  double half_life() const { return half_life_; }
  double score() const { return score_; }
  size_t MemoryBytes() const;

 private:
  struct Entry {
    uint64_t mixed = 0;
    double key = 0;
    uint32_t charge = 0;
    uint32_t heap_pos = 0;
    uint64_t request = 0;  // last request that accessed it (one access per request)
  };
  struct RecentRequest {
    uint64_t request = 0;
    bool broken = false;  // a sampled block of it missed
  };
  void SiftUp(size_t pos);
  void SiftDown(size_t pos);
  void HeapFix(size_t pos);
  void Remove(uint32_t entry);
  double HalfLifeAccesses(double capacity_blocks) const {
    return std::max(1.0, half_life_ * capacity_blocks);
  }

  double half_life_;
  double ghost_ratio_;
  double clock_ = 0;  // accesses seen
  double base_ = 0;   // ghosts' keys are relative to it
  double score_ = 0;
  uint64_t bytes_ = 0;
  absl::flat_hash_map<uint64_t, uint32_t> index_;  // mixed fingerprint -> entry
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_;
  std::vector<uint32_t> heap_;  // entry numbers, least valuable first
  GhostTable ghosts_;
  std::array<RecentRequest, 64> recent_{};  // by request % 64
};

}  // namespace turbokv::server::lrfu

#endif  // TURBOKV_SERVER_STORAGE_LRFU_SHADOW_H_
