// Publishes the block store's events to routers over ZMQ, in vLLM's KV-event schema
// (docs/kv-events.md; the encoding is kv_event_encoding.h).
//
// A BlockEventSink (server/storage/block_events.h): the store's calls only copy the hashes
// into a bounded queue and return; one publisher thread coalesces what is queued into one
// message per run of events of one namespace and sends it on a ZMQ PUB socket:
//   BlockStored       blocks a put made visible (no parent hash, no token ids: the server
//                     knows neither; block_size = the namespace's block_tokens)
//   BlockRemoved      blocks evicted, expired, deleted, or dropped as corrupt
//   AllBlocksCleared  the namespace was dropped
// Every event's medium is "turbokv". Each message is the three frames vLLM's
// ZmqEventPublisher sends: topic, sequence number (8 bytes, big-endian, from 0), payload
// (a msgpack KVEventBatch). The topic is "turbokv/" + the namespace id as 16 lowercase hex
// digits, so a subscriber can follow one namespace (zmq SUBSCRIBE prefix) and knows which
// namespace an AllBlocksCleared clears.
//
// Overload never reaches the store: past KvEventOptions::max_queued_hashes an event is
// dropped and counted, and the next message's sequence number skips one, so a subscriber
// that checks for gaps (as vLLM's example subscriber does) knows it missed events. There is
// no replay socket.
//
// Thread safety: the BlockEventSink methods and stats() may be called from any thread;
// Start, Shutdown and the destructor from one.
#ifndef TURBOKV_SERVER_EVENTS_KV_EVENT_PUBLISHER_H_
#define TURBOKV_SERVER_EVENTS_KV_EVENT_PUBLISHER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/events/kv_event_encoding.h"
#include "server/events/kv_event_options.h"
#include "server/storage/block_events.h"

namespace turbokv::server {

// The `medium` of every event turbokv-server publishes.
inline constexpr char kKvEventMedium[] = "turbokv";
// The topic of a namespace's messages: "turbokv/0123456789abcdef".
std::string KvEventTopic(uint64_t namespace_id);

class KvEventPublisher final : public BlockEventSink {
 public:
  // Tokens per block of a namespace (BlockStored's block_size), 0 when unknown. Called on
  // the publisher thread only, never from a sink method.
  using BlockTokensFn = std::function<uint32_t(uint64_t namespace_id)>;

  // Binds the PUB socket and starts the publisher thread. InvalidArgument: a malformed
  // listen_address or option out of range. Unavailable: the address cannot be bound.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Start(
      const KvEventOptions& options, BlockTokensFn block_tokens = nullptr);
  ~KvEventPublisher() override;  // Shutdown()
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Sends what is queued (events that arrive later are dropped and counted), then closes the
  // socket, giving subscribers up to 1 s to receive the last messages. Idempotent.
  void Shutdown();

  // The bound endpoint, e.g. "tcp://127.0.0.1:40123" (port 0 resolved).
  const std::string& endpoint() const { return endpoint_; }
  int port() const { return port_; }  // 0 for ipc endpoints

  struct Stats {
    uint64_t published_events = 0;  // events sent (one per store call: a put's blocks, ...)
    uint64_t published_hashes = 0;  // block hashes in them
    uint64_t dropped_events = 0;    // events dropped because the queue was full
    uint64_t dropped_hashes = 0;
    uint64_t messages = 0;  // ZMQ messages sent
  };
  Stats stats() const;

  // BlockEventSink: copy into the queue and return (never blocks on the network).
  void OnBlocksStored(uint64_t namespace_id, absl::Span<const std::string_view> hashes) override;
  void OnBlocksRemoved(uint64_t namespace_id, absl::Span<const std::string_view> hashes,
                       RemovalReason reason) override;
  void OnNamespaceCleared(uint64_t namespace_id) override;

 private:
  struct Queued {
    uint64_t namespace_id = 0;
    KvEvent event;
  };
  struct Socket;  // the ZMQ context and PUB socket (kv_event_publisher.cc)

  KvEventPublisher(const KvEventOptions& options, BlockTokensFn block_tokens);
  void Enqueue(uint64_t namespace_id, KvEvent::Type type,
               absl::Span<const std::string_view> hashes);
  void Run();  // the publisher thread
  // Sends `events` (one namespace's) as one message. Publisher thread only.
  void Send(uint64_t namespace_id, std::vector<KvEvent>* events);

  const KvEventOptions options_;
  const BlockTokensFn block_tokens_;
  std::unique_ptr<Socket> socket_;  // used by the publisher thread only (after Start)
  std::string endpoint_;
  int port_ = 0;

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<Queued> queue_;
  uint64_t queued_hashes_ = 0;
  bool stopping_ = false;
  bool gap_ = false;  // events were dropped since the last message
  Stats stats_;

  uint64_t next_seq_ = 0;  // publisher thread only
  std::thread thread_;
  bool shut_down_ = false;
};

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_EVENTS_KV_EVENT_PUBLISHER_H_
