#include "server/storage/meta_scan.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "server/storage/rocksdb_status.h"

namespace turbokv::server {
namespace {

using format::GetFixed64BE;
using format::GetFixed64LE;

constexpr size_t kMinHashBytes = 8;  // kMinBlockHashBytes (block_store.h)
constexpr size_t kMaxHashBytes = sizeof(ScannedBlock::hash);
// Blocks a chunk holds (about 100 bytes each), and chunks buffered between the scanning
// threads and the consumer.
constexpr size_t kChunkBlocks = 4096;
constexpr size_t kMaxQueuedChunks = 8;

// Keys as big-endian numbers of kKeyBytes bytes (shorter keys padded with zeros, which keeps
// their order), for bisecting the key space.
constexpr size_t kKeyBytes = 8 + kMaxHashBytes;
using KeyNumber = std::array<uint8_t, kKeyBytes + 1>;  // one more byte: the sum's carry

KeyNumber ToNumber(const rocksdb::Slice& key) {
  KeyNumber n{};
  std::memcpy(n.data() + 1, key.data(), std::min(key.size(), kKeyBytes));
  return n;
}
std::string ToKey(const KeyNumber& n) {
  return std::string(reinterpret_cast<const char*>(n.data()) + 1, kKeyBytes);
}
// (a + b) / 2.
KeyNumber Midpoint(const KeyNumber& a, const KeyNumber& b) {
  KeyNumber sum{};
  unsigned carry = 0;
  for (size_t i = sum.size(); i-- > 0;) {
    const unsigned v = unsigned{a[i]} + b[i] + carry;
    sum[i] = static_cast<uint8_t>(v);
    carry = v >> 8;
  }
  KeyNumber half{};
  unsigned low = 0;
  for (size_t i = 0; i < sum.size(); ++i) {
    half[i] = static_cast<uint8_t>((low << 7) | (sum[i] >> 1));
    low = sum[i] & 1;
  }
  return half;
}

// Range boundaries (the first key of each range but the first) that cut block_meta into
// `ranges` pieces of about equal bytes by RocksDB's size estimate (SST index blocks): each a
// bisection of the key space between the first and the last key. Empty when the column
// family is empty or too small to be worth cutting.
std::vector<std::string> SplitKeys(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* meta, int ranges) {
  std::vector<std::string> bounds;
  if (ranges <= 1) return bounds;
  std::string first, last;
  {
    rocksdb::ReadOptions ro;
    ro.fill_cache = false;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(ro, meta));
    it->SeekToFirst();
    if (!it->Valid()) return bounds;
    first = it->key().ToString();
    it->SeekToLast();
    if (!it->Valid()) return bounds;
    last = it->key().ToString();
  }
  rocksdb::SizeApproximationOptions size_options;
  size_options.include_memtables = true;
  size_options.include_files = true;
  auto bytes_below = [&](const std::string& key) {
    rocksdb::Range r(first, key);
    uint64_t size = 0;
    if (!db->GetApproximateSizes(size_options, meta, &r, 1, &size).ok()) return uint64_t{0};
    return size;
  };
  const std::string end = last + '\0';  // just past the last key
  const uint64_t total = bytes_below(end);
  constexpr uint64_t kMinRangeBytes = uint64_t{1} << 20;
  if (total < 2 * kMinRangeBytes) return bounds;
  const KeyNumber lo = ToNumber(first);
  const KeyNumber hi = ToNumber(last);
  for (int j = 1; j < ranges; ++j) {
    const uint64_t want = total * static_cast<uint64_t>(j) / static_cast<uint64_t>(ranges);
    KeyNumber a = lo, b = hi;  // bytes_below(a) < want <= bytes_below(b), about
    for (int step = 0; step < 64 && a != b; ++step) {
      const KeyNumber mid = Midpoint(a, b);
      if (mid == a) break;
      if (bytes_below(ToKey(mid)) < want) {
        a = mid;
      } else {
        b = mid;
      }
    }
    std::string key = ToKey(b);
    if (key > first && key <= last && (bounds.empty() || key > bounds.back())) {
      bounds.push_back(std::move(key));
    }
  }
  return bounds;
}

// The chunks handed from the scanning threads to the consumer, and spare ones to refill.
class ChunkQueue {
 public:
  explicit ChunkQueue(int producers) : producers_(producers) {}

  std::unique_ptr<MetaScanChunk> TakeSpare() {
    std::unique_lock<std::mutex> l(mu_);
    space_.wait(l, [&] { return full_.size() < kMaxQueuedChunks || stop_; });
    if (spare_.empty()) {
      auto c = std::make_unique<MetaScanChunk>();
      c->blocks.reserve(kChunkBlocks);
      return c;
    }
    std::unique_ptr<MetaScanChunk> c = std::move(spare_.back());
    spare_.pop_back();
    return c;
  }
  void Push(std::unique_ptr<MetaScanChunk> c) {
    std::lock_guard<std::mutex> l(mu_);
    full_.push_back(std::move(c));
    ready_.notify_one();
  }
  // A producer is done (after its last Push); `s` its status.
  void Done(const rocksdb::Status& s) {
    std::lock_guard<std::mutex> l(mu_);
    if (!s.ok() && status_.ok()) {
      status_ = s;
      stop_ = true;
      space_.notify_all();
    }
    --producers_;
    ready_.notify_one();
  }
  bool stopped() {
    std::lock_guard<std::mutex> l(mu_);
    return stop_;
  }
  // The next full chunk; nullptr once every producer is done and nothing is left.
  std::unique_ptr<MetaScanChunk> Pop() {
    std::unique_lock<std::mutex> l(mu_);
    ready_.wait(l, [&] { return !full_.empty() || producers_ == 0; });
    if (full_.empty()) return nullptr;
    std::unique_ptr<MetaScanChunk> c = std::move(full_.front());
    full_.pop_front();
    space_.notify_one();
    return c;
  }
  void Recycle(std::unique_ptr<MetaScanChunk> c) {
    c->blocks.clear();
    c->malformed.clear();
    std::lock_guard<std::mutex> l(mu_);
    spare_.push_back(std::move(c));
  }
  rocksdb::Status status() {
    std::lock_guard<std::mutex> l(mu_);
    return status_;
  }

 private:
  std::mutex mu_;
  std::condition_variable ready_;  // a chunk was pushed or a producer finished
  std::condition_variable space_;  // a chunk was popped, or the scan stopped
  std::deque<std::unique_ptr<MetaScanChunk>> full_;
  std::vector<std::unique_ptr<MetaScanChunk>> spare_;
  int producers_;
  bool stop_ = false;
  rocksdb::Status status_;
};

// Scans [lower, upper) of block_meta (joined with access) into chunks; null bounds: open.
// *cpu_s: the thread's CPU time at the end (a thread of its own).
void ScanRange(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* meta_cf,
               rocksdb::ColumnFamilyHandle* access_cf, const std::string* lower,
               const std::string* upper, ChunkQueue* queue, double* cpu_s) {
  rocksdb::Slice upper_slice;
  rocksdb::ReadOptions scan;
  // One sequential pass: read ahead in large pieces, keep the blocks out of the block cache
  // (nothing here is read again), no checksums (the repair check verified every file).
  scan.fill_cache = false;
  scan.readahead_size = size_t{4} << 20;
  scan.verify_checksums = false;
  if (upper != nullptr) {
    upper_slice = rocksdb::Slice(*upper);
    scan.iterate_upper_bound = &upper_slice;
  }
  std::unique_ptr<rocksdb::Iterator> meta(db->NewIterator(scan, meta_cf));
  std::unique_ptr<rocksdb::Iterator> access(db->NewIterator(scan, access_cf));
  if (lower != nullptr) {
    meta->Seek(*lower);
    access->Seek(*lower);
  } else {
    meta->SeekToFirst();
    access->SeekToFirst();
  }
  std::unique_ptr<MetaScanChunk> chunk = queue->TakeSpare();
  for (; meta->Valid(); meta->Next()) {
    const rocksdb::Slice key = meta->key();
    ScannedBlock b;
    const bool well_formed = key.size() >= 8 + kMinHashBytes && key.size() <= 8 + kMaxHashBytes &&
                             format::DecodeMeta(meta->value().ToStringView(), &b.meta);
    if (!well_formed) {
      chunk->malformed.push_back(key.ToString());
      continue;
    }
    b.namespace_id = GetFixed64BE(key.data());
    b.hash_bytes = static_cast<uint8_t>(key.size() - 8);
    std::memcpy(b.hash, key.data() + 8, b.hash_bytes);
    b.last_access = b.meta.put_time;
    while (access->Valid() && access->key().compare(key) < 0) access->Next();
    if (access->Valid() && access->key() == key) {
      const rocksdb::Slice v = access->value();
      if (v.size() == 8 || v.size() == 16) {
        b.last_access =
            std::max<int64_t>(b.last_access, static_cast<int64_t>(GetFixed64LE(v.data())));
        if (v.size() == 16) b.touch = GetFixed64LE(v.data() + 8);
      }
    }
    chunk->blocks.push_back(b);
    if (chunk->blocks.size() == kChunkBlocks) {
      queue->Push(std::move(chunk));
      chunk = queue->TakeSpare();
      if (queue->stopped()) break;
    }
  }
  rocksdb::Status s = meta->status();
  if (s.ok()) s = access->status();
  if (!chunk->blocks.empty() || !chunk->malformed.empty()) queue->Push(std::move(chunk));
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  *cpu_s = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  queue->Done(s);
}

}  // namespace

std::string ScannedBlock::Key() const {
  std::string key;
  format::PutFixed64BE(&key, namespace_id);
  key.append(hash, hash_bytes);
  return key;
}

absl::Status ScanBlockMeta(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* meta,
                           rocksdb::ColumnFamilyHandle* access, int threads,
                           absl::FunctionRef<void(MetaScanChunk&)> consume, MetaScanStats* stats) {
  const std::vector<std::string> bounds = SplitKeys(db, meta, std::max(threads, 1));
  const int ranges = static_cast<int>(bounds.size()) + 1;
  ChunkQueue queue(ranges);
  std::vector<std::thread> scanners;
  scanners.reserve(ranges);
  std::vector<double> cpu(ranges, 0.0);
  for (int i = 0; i < ranges; ++i) {
    const std::string* lower = i == 0 ? nullptr : &bounds[i - 1];
    const std::string* upper = i + 1 == ranges ? nullptr : &bounds[i];
    scanners.emplace_back(ScanRange, db, meta, access, lower, upper, &queue, &cpu[i]);
  }
  // Consumed as they come: decoding (the scanners) overlaps the caller's inserts.
  while (std::unique_ptr<MetaScanChunk> chunk = queue.Pop()) {
    if (queue.stopped()) {
      queue.Recycle(std::move(chunk));
      continue;  // drain: a scanner failed
    }
    consume(*chunk);
    queue.Recycle(std::move(chunk));
  }
  for (std::thread& t : scanners) t.join();
  stats->threads = ranges;
  stats->scanners_cpu_s = 0;
  for (double c : cpu) stats->scanners_cpu_s += c;
  return FromRocksDb(queue.status(), "scan block_meta and access");
}

void SortRestartOrder(std::vector<RestartRecord>& order) {
  const size_t n = order.size();
  if (n < 4096) {
    std::sort(order.begin(), order.end());
    return;
  }
  // One pass counts every digit.
  constexpr int kDigits = 8;
  std::vector<std::array<size_t, 256>> counts(kDigits);
  for (const RestartRecord& r : order) {
    for (int d = 0; d < kDigits; ++d) ++counts[d][(r.touch >> (8 * d)) & 0xff];
  }
  std::unique_ptr<RestartRecord[]> scratch(new RestartRecord[n]);  // default-initialized
  RestartRecord* src = order.data();
  RestartRecord* dst = scratch.get();
  for (int d = 0; d < kDigits; ++d) {
    const int shift = 8 * d;
    if (counts[d][(src[0].touch >> shift) & 0xff] == n) continue;  // all share this digit
    std::array<size_t, 256> next;
    size_t sum = 0;
    for (int b = 0; b < 256; ++b) {
      next[b] = sum;
      sum += counts[d][b];
    }
    for (size_t i = 0; i < n; ++i) dst[next[(src[i].touch >> shift) & 0xff]++] = src[i];
    std::swap(src, dst);
  }
  if (src != order.data()) std::copy(src, src + n, order.data());
  scratch.reset();
  // The radix passes are stable, so equal touch numbers are still in arrival order.
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    while (j < n && order[j].touch == order[i].touch) ++j;
    if (j - i > 1)
      std::sort(order.begin() + static_cast<ptrdiff_t>(i),
                order.begin() + static_cast<ptrdiff_t>(j));
    i = j;
  }
}

}  // namespace turbokv::server
