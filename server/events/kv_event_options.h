// Options of the KV-event publisher (docs/kv-events.md). Part of ServerOptions; main.cc fills
// it from flags, tests build it directly. Defaults are the initializers below; flags, ranges and
// help are in KvEventOptionTable().
#ifndef TURBOKV_SERVER_EVENTS_KV_EVENT_OPTIONS_H_
#define TURBOKV_SERVER_EVENTS_KV_EVENT_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/option_table.h"

namespace turbokv::server {

struct KvEventOptions {
  // HOST:PORT (an IP address or `*`; IPv6 in brackets) or unix:PATH where a ZMQ PUB socket
  // publishes the store's block events in vLLM's KV-event schema; port 0 picks a free port.
  // Empty: no events (nothing is queued or counted). Default: "".
  std::string listen_address;
  // Block hashes that may wait to be published. An event that would take the queue past it
  // is dropped and counted (the store is never slowed down), and the next message's sequence
  // number skips one so subscribers see the gap. Default: 1048576 (about
  // 64 MiB of 32-byte hashes at worst).
  uint64_t max_queued_hashes = uint64_t{1} << 20;
  // Messages ZMQ keeps per subscriber that does not read (its send high-water mark); past it
  // ZMQ drops messages for that subscriber (a gap in its sequence numbers).
  // Default: 100000 (vLLM's default).
  int send_hwm = 100000;
  // Longest a queued event waits before it is sent, milliseconds: events are coalesced into
  // one message per namespace for this long. Default: 10.
  int flush_interval_ms = 10;

  // InvalidArgument naming the field when one is malformed or out of range
  // (kv_event_publisher.cc).
  [[nodiscard]] absl::Status Validate() const;
};

// Flag, field name, range, unit and help of every KvEventOptions field (kv_event_publisher.cc).
const OptionTable<KvEventOptions>& KvEventOptionTable();

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_EVENTS_KV_EVENT_OPTIONS_H_
