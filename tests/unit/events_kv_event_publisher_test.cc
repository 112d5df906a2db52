// The KV-event publisher: vLLM's wire format (checked byte for byte on a small batch and by
// decoding with msgpack-c), and a real ZMQ subscriber on 127.0.0.1 receiving what the sink
// calls report, in order, with the queue bound and the sequence gap it leaves. The end-to-end
// check with vLLM's own decoder is tests/engine/test_kv_events.py.
#include <msgpack.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "server/events/kv_event_encoding.h"
#include "server/events/kv_event_publisher.h"

namespace turbokv::server {
namespace {

// A decoded event: what a subscriber sees.
struct Seen {
  std::string type;
  std::vector<std::string> hashes;
  int64_t block_size = -1;
  std::string medium;
  size_t fields = 0;
};

std::string Str(const msgpack_object& o) {
  return o.type == MSGPACK_OBJECT_STR   ? std::string(o.via.str.ptr, o.via.str.size)
         : o.type == MSGPACK_OBJECT_BIN ? std::string(o.via.bin.ptr, o.via.bin.size)
                                        : std::string("<not a string>");
}

// Decodes a KVEventBatch ([ts, [event maps]]); *ts gets the timestamp.
std::vector<Seen> Decode(const std::string& payload, double* ts = nullptr) {
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  size_t off = 0;
  EXPECT_EQ(msgpack_unpack_next(&u, payload.data(), payload.size(), &off), MSGPACK_UNPACK_SUCCESS);
  EXPECT_EQ(off, payload.size());
  std::vector<Seen> out;
  const msgpack_object& root = u.data;
  EXPECT_EQ(root.type, MSGPACK_OBJECT_ARRAY);
  EXPECT_EQ(root.via.array.size, 3u);
  EXPECT_EQ(root.via.array.ptr[0].type, MSGPACK_OBJECT_FLOAT64);
  if (ts != nullptr) *ts = root.via.array.ptr[0].via.f64;
  const msgpack_object& events = root.via.array.ptr[1];
  EXPECT_EQ(events.type, MSGPACK_OBJECT_ARRAY);
  for (uint32_t i = 0; i < events.via.array.size; ++i) {
    const msgpack_object& m = events.via.array.ptr[i];
    EXPECT_EQ(m.type, MSGPACK_OBJECT_MAP);
    Seen s;
    s.fields = m.via.map.size;
    for (uint32_t k = 0; k < m.via.map.size; ++k) {
      const std::string key = Str(m.via.map.ptr[k].key);
      const msgpack_object& v = m.via.map.ptr[k].val;
      if (key == "type") s.type = Str(v);
      if (key == "medium") s.medium = Str(v);
      if (key == "block_size") s.block_size = static_cast<int64_t>(v.via.u64);
      if (key == "block_hashes") {
        for (uint32_t h = 0; h < v.via.array.size; ++h) {
          EXPECT_EQ(v.via.array.ptr[h].type, MSGPACK_OBJECT_BIN);
          s.hashes.push_back(Str(v.via.array.ptr[h]));
        }
      }
    }
    out.push_back(std::move(s));
  }
  msgpack_unpacked_destroy(&u);
  return out;
}

TEST(KvEventEncodingTest, SmallBatchIsVllmsKvEventBatchByteForByte) {
  KvEvent removed;
  removed.type = KvEvent::Type::kBlockRemoved;
  removed.hashes = {"\x01\x02"};
  KvEvent cleared;
  cleared.type = KvEvent::Type::kAllBlocksCleared;
  const std::string got = EncodeKvEventBatch(1.5, {removed, cleared}, "turbokv");
  // msgspec.msgpack.encode(KVEventBatch(ts=1.5, events=[BlockRemoved(block_hashes=[b"\1\2"],
  // medium="turbokv"), AllBlocksCleared()])) in vLLM 0.32 / 0.34:
  // msgspec.msgpack.encode(KVEventBatch(ts=1.5, events=[BlockRemoved(block_hashes=[b"\1\2"],
  // medium="turbokv"), AllBlocksCleared()])) with vLLM 0.32 and 0.34:
  const std::string want = absl::HexStringToBytes(
      "93"                  // array(3): ts, events, dp rank
      "cb3ff8000000000000"  // float64 1.5
      "92"                  // array(2): the events
      "83"                  // map(3)
      "a474797065"
      "ac426c6f636b52656d6f766564"  // "type": "BlockRemoved"
      "ac626c6f636b5f686173686573"
      "91c4020102"  // "block_hashes": [bin 01 02]
      "a66d656469756d"
      "a7747572626f6b76"  // "medium": "turbokv"
      "81"                // map(1)
      "a474797065"
      "b0416c6c426c6f636b73436c6561726564"  // "type": "AllBlocksCleared"
      "c0");                                // data_parallel_rank: None
  EXPECT_EQ(absl::BytesToHexString(got), absl::BytesToHexString(want));
  const std::vector<Seen> seen = Decode(got);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].type, "BlockRemoved");
  EXPECT_EQ(seen[0].fields, 3u);
  EXPECT_EQ(seen[0].hashes, std::vector<std::string>{"\x01\x02"});
  EXPECT_EQ(seen[0].medium, "turbokv");
  EXPECT_EQ(seen[1].type, "AllBlocksCleared");
  EXPECT_EQ(seen[1].fields, 1u);
}

TEST(KvEventEncodingTest, BlockStoredCarriesEveryRequiredField) {
  KvEvent stored;
  stored.type = KvEvent::Type::kBlockStored;
  stored.hashes = {std::string(32, 'a'), std::string(32, 'b')};
  stored.block_size = 128;
  const std::string got = EncodeKvEventBatch(2.0, {stored}, "turbokv");
  // msgspec's bytes for KVEventBatch(ts=2.0, events=[BlockStored(block_hashes=[b"a" * 32,
  // b"b" * 32], parent_block_hash=None, token_ids=[], block_size=128, lora_id=None,
  // medium="turbokv", lora_name=None)]):
  EXPECT_EQ(absl::BytesToHexString(got),
            "93"
            "cb4000000000000000"
            "91"
            "88"
            "a474797065"
            "ab426c6f636b53746f726564"  // "type": "BlockStored"
            "ac626c6f636b5f686173686573"
            "92"  // "block_hashes": [
            "c420" +
                absl::BytesToHexString(std::string(32, 'a')) + "c420" +
                absl::BytesToHexString(std::string(32, 'b')) +  // ]
                "b1706172656e745f626c6f636b5f68617368"
                "c0"  // "parent_block_hash": None
                "a9746f6b656e5f696473"
                "90"  // "token_ids": []
                "aa626c6f636b5f73697a65"
                "cc80"  // "block_size": 128
                "a76c6f72615f6964"
                "c0"  // "lora_id": None
                "a66d656469756d"
                "a7747572626f6b76"  // "medium": "turbokv"
                "a96c6f72615f6e616d65"
                "c0"    // "lora_name": None
                "c0");  // data_parallel_rank: None
  const std::vector<Seen> seen = Decode(got);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].type, "BlockStored");
  // type, block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name:
  // every BlockStored field without a default in vLLM (msgspec rejects a map without one).
  EXPECT_EQ(seen[0].fields, 8u);
  EXPECT_EQ(seen[0].block_size, 128);
  EXPECT_EQ(seen[0].hashes, stored.hashes);
}

TEST(KvEventOptionsTest, RejectsMalformedAddressesAndRanges) {
  KvEventOptions o;
  EXPECT_TRUE(o.Validate().ok());  // off
  o.listen_address = "127.0.0.1";
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o.listen_address = "::1:5557";
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o.listen_address = "[::1]:5557";
  EXPECT_TRUE(o.Validate().ok());
  o.listen_address = "127.0.0.1:0";
  o.max_queued_hashes = 0;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
}

// A SUB socket on the publisher's endpoint, subscribed to every turbokv topic.
class Subscriber {
 public:
  explicit Subscriber(const std::string& endpoint) {
    sub_.set(zmq::sockopt::subscribe, "turbokv/");
    sub_.set(zmq::sockopt::rcvtimeo, 5000);
    sub_.connect(endpoint);
  }
  struct Message {
    std::string topic;
    uint64_t seq = 0;
    std::string payload;
  };
  void SetTimeoutMs(int ms) { sub_.set(zmq::sockopt::rcvtimeo, ms); }
  // False on timeout.
  bool Receive(Message* m) {
    std::array<zmq::message_t, 3> frames;
    for (size_t i = 0; i < frames.size(); ++i) {
      if (!sub_.recv(frames[i])) return false;
      EXPECT_EQ(frames[i].more(), i + 1 < frames.size());
    }
    m->topic = frames[0].to_string();
    EXPECT_EQ(frames[1].size(), 8u);
    m->seq = 0;
    for (size_t i = 0; i < 8; ++i) {
      m->seq = m->seq << 8 | static_cast<const unsigned char*>(frames[1].data())[i];
    }
    m->payload = frames[2].to_string();
    return true;
  }

 private:
  zmq::context_t ctx_{1};
  zmq::socket_t sub_{ctx_, zmq::socket_type::sub};
};

constexpr uint64_t kProbe = 0xffffffffffffffff;

// PUB/SUB drops what is sent before the subscription reaches the publisher: probe until one
// arrives, so the test's own events are not lost to the connection race. Returns the sequence
// number of the last message sent so far (every probe is received).
// `probe_ms`: how long to wait for one probe (more than the publisher's flush interval);
// *probes: how many probe events were queued (all of them are sent, received or not).
uint64_t WaitConnected(KvEventPublisher* pub, Subscriber* sub, int probe_ms = 600,
                       uint64_t* probes = nullptr) {
  sub->SetTimeoutMs(probe_ms);
  for (int i = 0; i < 30; ++i) {
    pub->OnNamespaceCleared(kProbe);
    if (probes != nullptr) *probes = i + 1;
    Subscriber::Message m;
    if (!sub->Receive(&m)) continue;
    EXPECT_EQ(m.topic, KvEventTopic(kProbe));
    // Probes sent before the connection were lost; those after it are all delivered. Drain
    // them (the publisher thread sends each probe as soon as it is queued).
    uint64_t last = m.seq;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    while (pub->stats().messages > last + 1) {
      if (!sub->Receive(&m)) break;
      last = m.seq;
    }
    sub->SetTimeoutMs(5000);
    return last;
  }
  ADD_FAILURE() << "the subscriber never received a probe";
  return 0;
}

TEST(KvEventPublisherTest, SubscriberReceivesEveryEventInOrderPerNamespaceTopic) {
  KvEventOptions o;
  o.listen_address = "127.0.0.1:0";
  o.flush_interval_ms = 0;
  auto pub = KvEventPublisher::Start(o, [](uint64_t ns) { return ns == 7 ? 128u : 0u; });
  ASSERT_TRUE(pub.ok()) << pub.status();
  ASSERT_GT((*pub)->port(), 0);
  EXPECT_EQ((*pub)->endpoint(), "tcp://127.0.0.1:" + std::to_string((*pub)->port()));
  Subscriber sub((*pub)->endpoint());
  uint64_t probes = 0;
  WaitConnected(pub->get(), &sub, 600, &probes);

  const std::string h1(32, '\x11'), h2(32, '\x22'), h3(16, '\x33');
  const std::vector<std::string_view> stored = {h1, h2};
  const std::vector<std::string_view> removed = {h2};
  const std::vector<std::string_view> other = {h3};
  (*pub)->OnBlocksStored(7, stored);
  (*pub)->OnBlocksRemoved(7, removed, RemovalReason::kEvicted);
  (*pub)->OnBlocksStored(9, other);
  (*pub)->OnNamespaceCleared(9);

  std::vector<std::pair<std::string, Seen>> got;
  uint64_t last_seq = 0;
  while (got.size() < 4) {
    Subscriber::Message m;
    ASSERT_TRUE(sub.Receive(&m)) << "received " << got.size() << " of 4 events";
    if (m.topic == KvEventTopic(kProbe)) continue;
    EXPECT_GT(m.seq, last_seq);
    last_seq = m.seq;
    for (Seen& s : Decode(m.payload)) got.emplace_back(m.topic, std::move(s));
  }
  EXPECT_EQ(got[0].first, "turbokv/0000000000000007");
  EXPECT_EQ(got[0].second.type, "BlockStored");
  EXPECT_EQ(got[0].second.hashes, (std::vector<std::string>{h1, h2}));
  EXPECT_EQ(got[0].second.block_size, 128);
  EXPECT_EQ(got[0].second.medium, "turbokv");
  EXPECT_EQ(got[1].second.type, "BlockRemoved");
  EXPECT_EQ(got[1].second.hashes, std::vector<std::string>{h2});
  EXPECT_EQ(got[2].first, "turbokv/0000000000000009");
  EXPECT_EQ(got[2].second.block_size, 0);  // unknown namespace
  EXPECT_EQ(got[3].second.type, "AllBlocksCleared");
  // The stats count a message once it is sent, which may be after the subscriber got it.
  for (int i = 0; i < 200 && (*pub)->stats().messages < last_seq + 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const KvEventPublisher::Stats st = (*pub)->stats();
  EXPECT_EQ(st.messages, last_seq + 1);  // no gap: every sequence number was sent
  EXPECT_EQ(st.published_events, probes + 4);
  EXPECT_EQ(st.published_hashes, 4u);
  EXPECT_EQ(st.dropped_events, 0u);
}

TEST(KvEventPublisherTest, FullQueueDropsCountsAndLeavesASequenceGap) {
  KvEventOptions o;
  o.listen_address = "127.0.0.1:0";
  o.max_queued_hashes = 3;
  o.flush_interval_ms = 300;  // the events below queue up within one flush interval
  auto pub = KvEventPublisher::Start(o);
  ASSERT_TRUE(pub.ok()) << pub.status();
  Subscriber sub((*pub)->endpoint());
  const uint64_t seq_before = WaitConnected(pub->get(), &sub);
  const std::string a(32, 'a'), b(32, 'b'), c(32, 'c'), d(32, 'd');
  const std::vector<std::string_view> two = {a, b};
  const std::vector<std::string_view> one = {c};
  const std::vector<std::string_view> more = {d};
  (*pub)->OnBlocksStored(1, two);
  (*pub)->OnBlocksStored(1, one);   // 3 queued: at the bound
  (*pub)->OnBlocksStored(1, more);  // dropped
  EXPECT_EQ((*pub)->stats().dropped_events, 1u);
  EXPECT_EQ((*pub)->stats().dropped_hashes, 1u);
  Subscriber::Message got;
  do {
    ASSERT_TRUE(sub.Receive(&got));
  } while (got.topic == KvEventTopic(kProbe));
  // One message with both queued events, and one sequence number skipped before it.
  EXPECT_EQ(got.seq, seq_before + 2);
  const std::vector<Seen> seen = Decode(got.payload);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].hashes.size() + seen[1].hashes.size(), 3u);
}

TEST(KvEventPublisherTest, ShutdownSendsWhatIsQueued) {
  KvEventOptions o;
  o.listen_address = "127.0.0.1:0";
  o.flush_interval_ms = 2000;  // Shutdown ends the wait early
  auto pub = KvEventPublisher::Start(o);
  ASSERT_TRUE(pub.ok()) << pub.status();
  Subscriber sub((*pub)->endpoint());
  WaitConnected(pub->get(), &sub, /*probe_ms=*/2500);
  const std::string a(32, 'a');
  const std::vector<std::string_view> one = {a};
  (*pub)->OnBlocksRemoved(3, one, RemovalReason::kDeleted);
  const auto t0 = std::chrono::steady_clock::now();
  (*pub)->Shutdown();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500));
  EXPECT_EQ((*pub)->stats().dropped_events, 0u);
  (*pub)->OnBlocksRemoved(3, one, RemovalReason::kDeleted);  // after shutdown: dropped
  EXPECT_EQ((*pub)->stats().dropped_events, 1u);
  Subscriber::Message m;
  do {
    ASSERT_TRUE(sub.Receive(&m));
  } while (m.topic == KvEventTopic(kProbe));
  EXPECT_EQ(m.topic, "turbokv/0000000000000003");
  EXPECT_EQ(Decode(m.payload)[0].type, "BlockRemoved");
}

TEST(KvEventPublisherTest, AnAddressInUseIsUnavailable) {
  KvEventOptions o;
  o.listen_address = "127.0.0.1:0";
  auto first = KvEventPublisher::Start(o);
  ASSERT_TRUE(first.ok()) << first.status();
  o.listen_address = "127.0.0.1:" + std::to_string((*first)->port());
  auto second = KvEventPublisher::Start(o);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace turbokv::server
