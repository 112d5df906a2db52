#include "server/events/kv_event_publisher.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <utility>
#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace turbokv::server {
namespace {

// Hashes in one ZMQ message at most (about 600 KiB of 32-byte hashes): a burst of evictions
// goes out as several messages rather than one huge one.
constexpr uint64_t kMaxHashesPerMessage = 16384;

// "HOST:PORT" / "unix:PATH" -> the ZMQ endpoint to bind; *ipv6 when the host is bracketed.
absl::StatusOr<std::string> ZmqEndpoint(const std::string& address, bool* ipv6) {
  *ipv6 = false;
  if (address.rfind("unix:", 0) == 0) {
    if (address.size() == 5) {
      return absl::InvalidArgumentError("kv_events.listen_address unix: needs a path");
    }
    return absl::StrCat("ipc://", address.substr(5));
  }
  const size_t colon = address.rfind(':');
  uint32_t port = 0;
  if (colon == std::string::npos || colon == 0 ||
      !absl::SimpleAtoi(address.substr(colon + 1), &port) || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kv_events.listen_address \"", address,
        "\" is not HOST:PORT (an IP address or *, IPv6 in brackets; port 0 picks a free one) "
        "or unix:PATH"));
  }
  std::string host = address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    *ipv6 = true;
  } else if (host.find(':') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_events.listen_address \"", address, "\": put an IPv6 host in brackets"));
  }
  return absl::StrCat("tcp://", host, ":", port == 0 ? std::string("*") : absl::StrCat(port));
}

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

struct KvEventPublisher::Socket {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
};

const OptionTable<KvEventOptions>& KvEventOptionTable() {
  using O = KvEventOptions;
  static const auto* table = [] {
    auto* t = new OptionTable<O>;
    t->Text("--kv-events-listen", "kv_events.listen_address", &O::listen_address, "HOST:PORT", {},
            "Publish the store's block events (stored, evicted, expired, deleted, namespace "
            "dropped) for KV-aware routers on a ZMQ PUB socket at HOST:PORT (an IP or *; port 0 "
            "picks a free one) or unix:PATH, in vLLM's KV-event schema (msgpack), one topic per "
            "namespace (docs/kv-events.md); \"\" = off. Unauthenticated: bind it to a trusted "
            "network");
    t->Number<uint64_t>("", "kv_events.max_queued_hashes", &O::max_queued_hashes, 1,
                        uint64_t{1} << 30, OptionUnit::kNone,
                        "Block hashes that may wait to be published");
    t->Number("", "kv_events.send_hwm", &O::send_hwm, 1, 10'000'000, OptionUnit::kNone,
              "ZMQ send high-water mark per subscriber, messages");
    t->Number("", "kv_events.flush_interval_ms", &O::flush_interval_ms, 0, 10'000,
              OptionUnit::kMilliseconds, "Longest a queued event waits before it is sent");
    return t;
  }();
  return *table;
}

absl::Status KvEventOptions::Validate() const {
  if (!listen_address.empty()) {
    bool ipv6 = false;
    if (absl::StatusOr<std::string> e = ZmqEndpoint(listen_address, &ipv6); !e.ok()) {
      return e.status();
    }
  }
  return KvEventOptionTable().Validate(*this);
}

std::string KvEventTopic(uint64_t namespace_id) {
  return absl::StrCat("turbokv/", absl::Hex(namespace_id, absl::kZeroPad16));
}

KvEventPublisher::KvEventPublisher(const KvEventOptions& options, BlockTokensFn block_tokens)
    : options_(options), block_tokens_(std::move(block_tokens)) {}

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(
    const KvEventOptions& options, BlockTokensFn block_tokens) {
  if (absl::Status valid = options.Validate(); !valid.ok()) return valid;
  if (options.listen_address.empty()) {
    return absl::InvalidArgumentError("kv_events.listen_address is empty: nothing to publish on");
  }
  bool ipv6 = false;
  absl::StatusOr<std::string> endpoint = ZmqEndpoint(options.listen_address, &ipv6);
  if (!endpoint.ok()) return endpoint.status();
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(options, std::move(block_tokens)));
  p->socket_ = std::make_unique<Socket>();
  try {
    zmq::socket_t& pub = p->socket_->pub;
    pub.set(zmq::sockopt::sndhwm, options.send_hwm);
    pub.set(zmq::sockopt::linger, 1000);
    if (ipv6) pub.set(zmq::sockopt::ipv6, 1);
    pub.bind(*endpoint);
    p->endpoint_ = pub.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot publish KV events on ", options.listen_address, " (", *endpoint, "): ", e.what()));
  }
  if (p->endpoint_.rfind("tcp://", 0) == 0) {
    const size_t colon = p->endpoint_.rfind(':');
    int port = 0;
    if (colon != std::string::npos && absl::SimpleAtoi(p->endpoint_.substr(colon + 1), &port)) {
      p->port_ = port;
    }
  }
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  return p;
}

KvEventPublisher::~KvEventPublisher() { Shutdown(); }

void KvEventPublisher::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  socket_.reset();  // closes the socket (linger: 1 s), then terminates the context
}

KvEventPublisher::Stats KvEventPublisher::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

void KvEventPublisher::OnBlocksStored(uint64_t namespace_id,
                                      absl::Span<const std::string_view> hashes) {
  if (!hashes.empty()) Enqueue(namespace_id, KvEvent::Type::kBlockStored, hashes);
}

void KvEventPublisher::OnBlocksRemoved(uint64_t namespace_id,
                                       absl::Span<const std::string_view> hashes,
                                       RemovalReason /*reason*/) {
  // vLLM's BlockRemoved has no reason field; the reason stays a server-side matter.
  if (!hashes.empty()) Enqueue(namespace_id, KvEvent::Type::kBlockRemoved, hashes);
}

void KvEventPublisher::OnNamespaceCleared(uint64_t namespace_id) {
  Enqueue(namespace_id, KvEvent::Type::kAllBlocksCleared, {});
}

void KvEventPublisher::Enqueue(uint64_t namespace_id, KvEvent::Type type,
                               absl::Span<const std::string_view> hashes) {
  // Copied before the lock: the lock is held for a deque push only.
  Queued q;
  q.namespace_id = namespace_id;
  q.event.type = type;
  q.event.hashes.assign(hashes.begin(), hashes.end());
  const uint64_t n = std::max<uint64_t>(hashes.size(), 1);
  bool wake = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_ || queued_hashes_ + n > options_.max_queued_hashes) {
      stats_.dropped_events += 1;
      stats_.dropped_hashes += hashes.size();
      gap_ = true;
      return;
    }
    wake = queue_.empty();
    queued_hashes_ += n;
    queue_.push_back(std::move(q));
  }
  if (wake) cv_.notify_one();
}

void KvEventPublisher::Run() {
  absl::flat_hash_map<uint64_t, uint32_t> block_tokens;  // cache of block_tokens_
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stopping, nothing left
    if (!stopping_ && options_.flush_interval_ms > 0) {
      // Let a burst accumulate into fewer, larger messages.
      cv_.wait_for(l, std::chrono::milliseconds(options_.flush_interval_ms),
                   [&] { return stopping_; });
    }
    std::deque<Queued> taken;
    taken.swap(queue_);
    queued_hashes_ = 0;
    const bool gap = gap_;
    gap_ = false;
    l.unlock();
    if (gap) ++next_seq_;  // a sequence number never sent: subscribers see the gap

    uint64_t events = 0, hashes = 0, messages = 0;
    std::vector<KvEvent> run;
    uint64_t run_ns = 0, run_hashes = 0;
    auto flush = [&] {
      if (run.empty()) return;
      events += run.size();
      hashes += run_hashes;
      Send(run_ns, &run);
      ++messages;
      run.clear();
      run_hashes = 0;
    };
    for (Queued& q : taken) {
      if (!run.empty() && (q.namespace_id != run_ns || run_hashes >= kMaxHashesPerMessage)) {
        flush();
      }
      run_ns = q.namespace_id;
      if (q.event.type == KvEvent::Type::kBlockStored) {
        auto it = block_tokens.find(q.namespace_id);
        if (it == block_tokens.end()) {
          const uint32_t bt = block_tokens_ ? block_tokens_(q.namespace_id) : 0;
          it = block_tokens.emplace(q.namespace_id, bt).first;
        }
        q.event.block_size = it->second;
      } else if (q.event.type == KvEvent::Type::kAllBlocksCleared) {
        block_tokens.erase(q.namespace_id);  // a re-registered id may have another shape
      }
      run_hashes += q.event.hashes.size();
      run.push_back(std::move(q.event));
    }
    flush();
    l.lock();
    stats_.published_events += events;
    stats_.published_hashes += hashes;
    stats_.messages += messages;
  }
}

void KvEventPublisher::Send(uint64_t namespace_id, std::vector<KvEvent>* events) {
  const std::string topic = KvEventTopic(namespace_id);
  const std::string payload = EncodeKvEventBatch(UnixSeconds(), *events, kKvEventMedium);
  std::array<unsigned char, 8> seq{};
  for (int i = 0; i < 8; ++i) seq[i] = static_cast<unsigned char>(next_seq_ >> (56 - 8 * i));
  ++next_seq_;
  try {
    zmq::socket_t& pub = socket_->pub;
    // PUB never blocks: a subscriber past its high-water mark loses the message (a gap).
    (void)pub.send(zmq::buffer(topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    (void)pub.send(zmq::buffer(seq), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    (void)pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::warn("KV event message {} on {} not sent: {}", next_seq_ - 1, endpoint_, e.what());
  }
}

}  // namespace turbokv::server
