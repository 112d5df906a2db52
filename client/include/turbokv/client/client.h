// C++ client of the turbokv service (proto/turbokv/v1/turbokv.proto, docs/api.md).
//
// Shapes: a raw KV block is the dense row-major tensor
//   [num_layers][2][block_tokens][num_kv_heads][head_dim]   (index 0 of the "2" axis = K, 1 = V)
// little-endian, in the namespace dtype on put (fp16 / bf16: 2 bytes per value, fp32: 4).
// A packed block is the codec's self-describing byte form (kernels/FORMAT.md).
// Block hashes are 8..32 bytes; PrefixHasher (prefix_hasher.h) makes the standard 32-byte ones.
//
// Errors: every call returns absl::Status / StatusOr whose code is the gRPC code of the RPC
// (absl and gRPC codes are equal):
//   InvalidArgument   bad descriptor, shape, dtype, hash length, block size, malformed packed
//                     block (also raised locally, before any RPC, for mismatched arguments)
//   NotFound          unknown namespace (a missing *block* is never an error: see GetBlocks)
//   ResourceExhausted store full with nothing evictable, request too large
//   Unavailable       server unreachable or shutting down, after all retries
//   DeadlineExceeded  the call's deadline passed (retries included)
//   DataLoss          corruption detected by the server, or a malformed response stream
//   Internal          the server broke the protocol (e.g. wrong number of results)
//
// Retries: every RPC of the v1 API is idempotent (RegisterNamespace returns the same id, a
// re-put of a hash stores the same block, Get/Lookup/Stats only read, Delete/Drop converge), so
// every call is retried on UNAVAILABLE with exponential backoff, at most
// ClientOptions::max_attempts attempts in total and never past the call's deadline. Streams
// are retried as a whole. No other code is retried.
//
// Deadlines: one deadline per call (CallOptions::timeout, default ClientOptions::timeout),
// covering all attempts and backoff sleeps.
//
// Thread safety: a Client is thread-safe; share one per process (it owns one gRPC channel,
// which multiplexes concurrent calls over HTTP/2).
#ifndef TURBOKV_CLIENT_CLIENT_H_
#define TURBOKV_CLIENT_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "turbokv/client/rendezvous.h"

namespace turbokv::client {

// Element type of raw KV tensors. Values equal turbokv.v1.DType.
enum class DType : int {
  kUnspecified = 0,  // on GetBlocks: the namespace dtype
  kFloat16 = 1,
  kBFloat16 = 2,
  kFloat32 = 3,
};
// 2, 2, 4; 0 for kUnspecified.
size_t DTypeSize(DType dtype);
// "fp16", "bf16", "fp32", "unspecified".
const char* DTypeName(DType dtype);
// Accepts "fp16"/"float16"/"f16", "bf16"/"bfloat16", "fp32"/"float32"/"f32".
[[nodiscard]] absl::StatusOr<DType> ParseDType(absl::string_view name);

// How block bytes travel. Values equal turbokv.v1.Encoding.
enum class Encoding : int {
  kRaw = 1,     // raw layout tensor (namespace dtype on put; requested dtype on get)
  kPacked = 2,  // packed block, exactly as stored
};

// How one K (or V) section is stored (turbokv.v1.SectionCodec).
struct SectionCodec {
  uint32_t bits = 4;         // 1..6, 8: TurboQuant; 16: fp16; 0: raw source bytes
  uint32_t group_size = 32;  // power of two in [8, 256] dividing head_dim
  bool qjl = false;          // 1-bit QJL residual
};

// Codec of a namespace (turbokv.v1.CodecConfig): a preset name, or explicit sections.
struct CodecConfig {
  std::string preset;               // "k4v4-g32", "raw", ... Default: "" (server default)
  std::optional<SectionCodec> key;  // when both key and value are set, preset is ignored
  std::optional<SectionCodec> value;
  uint32_t protected_first_layers = 0;    // Default: 0
  uint32_t protected_last_layers = 0;     // Default: 0
  uint32_t protected_bits = 0;            // 8 or 16; Default: 0 (= 8)
  bool disable_norm_correction = false;   // Default: false
  std::optional<uint64_t> rotation_seed;  // Default: unset (codec default)
  std::optional<uint64_t> qjl_seed;       // Default: unset (codec default)
};

// Everything that must match for stored KV to be reusable (turbokv.v1.NamespaceDescriptor).
struct NamespaceDescriptor {
  std::string model;           // model id, e.g. "HuggingFaceTB/SmolLM2-135M-Instruct"
  std::string model_revision;  // weights revision / file hash
  DType dtype = DType::kFloat16;
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;
  uint32_t head_dim = 0;
  uint32_t block_tokens = 0;  // tokens per block
  uint32_t tp_rank = 0;
  uint32_t tp_size = 0;    // 0 and 1 both mean unsharded
  std::string cache_salt;  // tenant / cache salt
  CodecConfig codec;
  // Blocks expire this long after their last put or get; 0 = never. Unset on register: a new
  // namespace never expires, an existing one keeps its TTL.
  std::optional<uint32_t> ttl_seconds;

  // num_layers * 2 * block_tokens * num_kv_heads * head_dim.
  uint64_t values_per_block() const;
  // values_per_block() * DTypeSize(dtype).
  uint64_t raw_block_bytes() const;
};

// Result of RegisterNamespace.
struct NamespaceInfo {
  uint64_t namespace_id = 0;        // stable across restarts, servers and client languages
  bool created = false;             // false when it already existed
  NamespaceDescriptor descriptor;   // canonical form (codec resolved to explicit sections)
  uint64_t raw_block_bytes = 0;     // bytes of one raw block in the namespace dtype
  uint64_t packed_block_bytes = 0;  // bytes of one packed block
  double bits_per_value = 0;        // packed_block_bytes * 8 / values per block
};

// Outcome of one block of PutBlocks.
struct BlockPutResult {
  std::string block_hash;
  absl::Status status;        // OK exactly when the block is stored (durable per the server)
  uint64_t stored_bytes = 0;  // packed bytes stored (when OK)
};

// What a server's LRFU eviction policy chose to rank blocks by (proto PolicyTuning): both in
// turnovers of the server's capacity in blocks. ShardedClient sends its cluster's tuning node's
// choice to the other nodes (docs/cluster.md, "One tuning for the cluster").
struct PolicyTuning {
  double half_life = 0;   // of a block's decayed access count
  double unseen_age = 0;  // of a block stored with no history
  friend bool operator==(const PolicyTuning& a, const PolicyTuning& b) {
    return a.half_life == b.half_life && a.unseen_age == b.unseen_age;
  }
};

struct LookupResult {
  uint32_t matched_blocks = 0;  // leading hashes of the chain that are stored
  uint64_t matched_tokens = 0;  // matched_blocks * block_tokens
  // The server's eviction-policy tuning after the call; nullopt from an LRU server and from
  // ShardedClient.
  std::optional<PolicyTuning> tuning = std::nullopt;
};

// What GetBlocks asks for.
struct GetOptions {
  Encoding encoding = Encoding::kRaw;
  DType dtype = DType::kUnspecified;  // RAW only; kUnspecified = namespace dtype
  uint32_t layer_begin = 0;           // RAW only: first layer. Default: 0
  uint32_t layer_end = 0;             // RAW only: one past the last layer; 0 = num_layers
};

struct GetBlocksResult {
  Encoding encoding = Encoding::kRaw;
  // RAW: dtype of the data (resolved by the server); kUnspecified when nothing was found.
  DType dtype = DType::kUnspecified;
  // One entry per requested hash, in request order: nullopt when the block is not stored.
  // RAW: [layer_end - layer_begin][2][block_tokens][num_kv_heads][head_dim] of `dtype`.
  // PACKED: the packed block.
  std::vector<std::optional<std::string>> blocks;
};

struct NamespaceStats {
  uint64_t namespace_id = 0;
  NamespaceDescriptor descriptor;
  uint64_t blocks = 0;
  uint64_t stored_bytes = 0;   // packed bytes on disk
  uint64_t logical_bytes = 0;  // raw bytes those blocks represent in the namespace dtype
};

// Byte terms (turbokv.v1.StatsResponse): stored = packed value bytes; used = bytes charged
// against the capacity (stored plus keys and metadata); logical = raw bytes the blocks
// represent. Compression ratio = logical_bytes / stored_bytes.
struct ServerStats {
  uint64_t capacity_bytes = 0;  // hard budget on used_bytes
  uint64_t used_bytes = 0;
  uint64_t stored_bytes = 0;
  uint64_t blocks = 0;
  uint64_t logical_bytes = 0;
  uint64_t evicted_blocks = 0;
  uint64_t checksum_failures = 0;
  std::string codec_backend;  // "cpu-avx2", "cpu-scalar", "cuda"
  std::string durability;     // "none", "wal", "fsync"
  std::vector<NamespaceStats> namespaces;
  std::string version;
  // ShardedClient::Stats: the nodes that did not answer, as {address, status}; their figures
  // are missing from the sums above. Empty from a single-server Client.
  std::vector<std::pair<std::string, absl::Status>> unanswered_nodes;
};

// Client configuration. Every field has a default; Validate() checks ranges.
// How the client reaches a secured server (docs/server.md, "Security"). Default: plaintext,
// no token.
struct ClientSecurity {
  // TLS with the system's roots; implied by ca_file or cert_file. Default: false.
  bool tls = false;
  // PEM bundle of the CAs trusted for the server certificate. Default: "" (system roots).
  std::string ca_file;
  // PEM client certificate chain and key, for a server with mutual TLS. Both or neither.
  std::string cert_file;
  std::string key_file;
  // The name checked against the server certificate when it is not the target's host
  // (GRPC_SSL_TARGET_NAME_OVERRIDE_ARG). Default: "".
  std::string server_name;
  // Bearer token sent as `authorization: Bearer <token>` on every call, or a file holding it
  // (read at Connect, whitespace trimmed). At most one of them. Default: "".
  std::string token;
  std::string token_file;

  bool uses_tls() const { return tls || !ca_file.empty() || !cert_file.empty(); }
};

struct ClientOptions {
  // TLS and bearer token. Default: plaintext, no token.
  ClientSecurity security;
  // Deadline of one call, all attempts included. Default: 30 s.
  absl::Duration timeout = absl::Seconds(30);
  // Attempts per call on UNAVAILABLE (1 = no retry). Range [1, 10]. Default: 4.
  int max_attempts = 4;
  // Backoff before the 2nd attempt; multiplied by backoff_multiplier each time, capped at
  // max_backoff, with +-20% jitter. Defaults: 50 ms, x2, 2 s.
  absl::Duration initial_backoff = absl::Milliseconds(50);
  double backoff_multiplier = 2.0;
  absl::Duration max_backoff = absl::Seconds(2);
  // Largest `data` of one PutBlocks message. Range [1 KiB, 1 MiB]. Default: 1 MiB (the API's
  // limit, proto/turbokv/v1/turbokv.proto).
  size_t max_chunk_bytes = size_t{1} << 20;
  // Largest message the client accepts. Default: 16 MiB (server chunks are <= ~1 MiB).
  int max_receive_message_bytes = 16 << 20;
  // Longest wait between reconnection attempts of the channel to a server that went away;
  // zero = gRPC's default (120 s). The sharded client uses 1 s so a restarted node is found
  // again quickly. Range: 0 or [100 ms, 10 min]. Default: 0.
  absl::Duration max_reconnect_backoff = absl::ZeroDuration();
  // TCP connections (gRPC channels) to the target; calls take them in turn. One connection
  // carries every concurrent call's bytes through one socket, read by one server thread at a
  // time; several let the server receive concurrent large puts in parallel (a client used by
  // N threads at once: up to N). Range [1, 64]. Default: 1.
  int connections = 1;

  [[nodiscard]] absl::Status Validate() const;
};

// Per-call overrides.
struct CallOptions {
  // Deadline of this call; zero = ClientOptions::timeout.
  absl::Duration timeout = absl::ZeroDuration();
  // PutBlocks: the request puts more blocks of the same chain after this call's last block (in
  // another call, or on another node: ShardedClient sets it on the per-node calls that do not
  // hold the call's last block). Sent in the stream's header (PutBlocksHeader.chain_continues);
  // the server's eviction policy then does not take the call's last block for the request's
  // last, partly filled block (docs/cluster.md, "Placement"). Ignored by other calls. Default:
  // false.
  bool chain_continues = false;
  // Lookup: the server's eviction policy takes this tuning instead of its own choice
  // (LookupRequest.follow_tuning; ShardedClient sets it on the nodes other than the tuning
  // node). Ignored by an LRU server, one started with --ignore-client-tuning, and other calls.
  // Default: none.
  std::optional<PolicyTuning> follow_tuning = std::nullopt;
};

// The client interface that both Client (one server) and ShardedClient (a cluster) implement:
// code that stores and fetches blocks is written against StoreClient and works with either.
// The public methods (with their defaults) are non-virtual and forward to the private virtual
// Do* methods each implementation overrides (default arguments stay off virtual functions).
// `chain`: where `hashes` sit in their prefix chain; a cluster places blocks by it, one server
// ignores it. Call errors common to every method: see the top of this file.
class StoreClient {
 public:
  virtual ~StoreClient() = default;

  // Registers (or finds) a namespace. Idempotent: the same descriptor gives the same id.
  // InvalidArgument: bad descriptor or codec.
  [[nodiscard]] absl::StatusOr<NamespaceInfo> RegisterNamespace(
      const NamespaceDescriptor& descriptor, const CallOptions& call = {}) const {
    return DoRegisterNamespace(descriptor, call);
  }
  // Stores blocks: blocks[i] under hashes[i], all `encoding` (RAW: raw layout in the namespace
  // dtype, exactly raw_block_bytes; PACKED: a packed block of this namespace). One client
  // stream; every block travels in chunks of at most ClientOptions::max_chunk_bytes.
  // Returns one result per block, in order; a per-block failure (e.g. InvalidArgument for a
  // wrong size) is in its BlockPutResult, not in the returned status.
  // Call errors: InvalidArgument (hashes.size() != blocks.size()), NotFound (namespace), and
  // the common ones above. An empty batch returns an empty vector without an RPC.
  [[nodiscard]] absl::StatusOr<std::vector<BlockPutResult>> PutBlocks(
      uint64_t namespace_id, absl::Span<const std::string> hashes,
      absl::Span<const absl::Span<const uint8_t>> blocks, Encoding encoding = Encoding::kRaw,
      const CallOptions& call = {}, const ChainContext& chain = {}) const {
    return DoPutBlocks(namespace_id, hashes, blocks, encoding, call, chain);
  }
  // How many leading blocks of the prefix chain are stored. Index only (no value I/O).
  // lease_seconds > 0 pins the matched blocks against eviction until a GetBlocks of them or
  // the lease ends. NotFound: unknown namespace.
  [[nodiscard]] absl::StatusOr<LookupResult> Lookup(uint64_t namespace_id,
                                                    absl::Span<const std::string> hashes,
                                                    uint32_t lease_seconds = 0,
                                                    const CallOptions& call = {},
                                                    const ChainContext& chain = {}) const {
    return DoLookup(namespace_id, hashes, lease_seconds, call, chain);
  }
  // Fetches blocks, reassembling the server's chunks. Missing blocks are nullopt entries.
  // InvalidArgument: bad dtype / layer range (RAW); NotFound: unknown namespace; DataLoss /
  // Internal: a response stream that does not reassemble into the promised sizes.
  [[nodiscard]] absl::StatusOr<GetBlocksResult> GetBlocks(uint64_t namespace_id,
                                                          absl::Span<const std::string> hashes,
                                                          const GetOptions& get = {},
                                                          const CallOptions& call = {},
                                                          const ChainContext& chain = {}) const {
    return DoGetBlocks(namespace_id, hashes, get, call, chain);
  }
  // Deletes blocks; returns how many existed. NotFound: unknown namespace.
  [[nodiscard]] absl::StatusOr<uint32_t> DeleteBlocks(uint64_t namespace_id,
                                                      absl::Span<const std::string> hashes,
                                                      const CallOptions& call = {},
                                                      const ChainContext& chain = {}) const {
    return DoDeleteBlocks(namespace_id, hashes, call, chain);
  }
  // Drops a namespace and all its blocks; returns the number of blocks deleted.
  [[nodiscard]] absl::StatusOr<uint64_t> DropNamespace(uint64_t namespace_id,
                                                       const CallOptions& call = {}) const {
    return DoDropNamespace(namespace_id, call);
  }
  // Server-wide figures and every namespace (the server sends them in pages; this follows
  // all pages within the one deadline).
  [[nodiscard]] absl::StatusOr<ServerStats> Stats(const CallOptions& call = {}) const {
    return DoStats(call);
  }

 private:
  virtual absl::StatusOr<NamespaceInfo> DoRegisterNamespace(const NamespaceDescriptor& descriptor,
                                                            const CallOptions& call) const = 0;
  virtual absl::StatusOr<std::vector<BlockPutResult>> DoPutBlocks(
      uint64_t namespace_id, absl::Span<const std::string> hashes,
      absl::Span<const absl::Span<const uint8_t>> blocks, Encoding encoding,
      const CallOptions& call, const ChainContext& chain) const = 0;
  virtual absl::StatusOr<LookupResult> DoLookup(uint64_t namespace_id,
                                                absl::Span<const std::string> hashes,
                                                uint32_t lease_seconds, const CallOptions& call,
                                                const ChainContext& chain) const = 0;
  virtual absl::StatusOr<GetBlocksResult> DoGetBlocks(uint64_t namespace_id,
                                                      absl::Span<const std::string> hashes,
                                                      const GetOptions& get,
                                                      const CallOptions& call,
                                                      const ChainContext& chain) const = 0;
  virtual absl::StatusOr<uint32_t> DoDeleteBlocks(uint64_t namespace_id,
                                                  absl::Span<const std::string> hashes,
                                                  const CallOptions& call,
                                                  const ChainContext& chain) const = 0;
  virtual absl::StatusOr<uint64_t> DoDropNamespace(uint64_t namespace_id,
                                                   const CallOptions& call) const = 0;
  virtual absl::StatusOr<ServerStats> DoStats(const CallOptions& call) const = 0;
};

class Client final : public StoreClient {
 public:
  // Creates a client for `target` ("host:port", or any gRPC target such as "dns:///svc:50051").
  // Does not connect: the channel connects on the first call, and reconnects on its own.
  // InvalidArgument: empty target or invalid options.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Client>> Connect(
      const std::string& target, const ClientOptions& options = {});
  ~Client() override;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const;

 private:
  // StoreClient's calls, for one server (`chain` is ignored: the server holds every block).
  absl::StatusOr<NamespaceInfo> DoRegisterNamespace(const NamespaceDescriptor& descriptor,
                                                    const CallOptions& call) const override;
  absl::StatusOr<std::vector<BlockPutResult>> DoPutBlocks(
      uint64_t namespace_id, absl::Span<const std::string> hashes,
      absl::Span<const absl::Span<const uint8_t>> blocks, Encoding encoding,
      const CallOptions& call, const ChainContext& chain) const override;
  absl::StatusOr<LookupResult> DoLookup(uint64_t namespace_id, absl::Span<const std::string> hashes,
                                        uint32_t lease_seconds, const CallOptions& call,
                                        const ChainContext& chain) const override;
  absl::StatusOr<GetBlocksResult> DoGetBlocks(uint64_t namespace_id,
                                              absl::Span<const std::string> hashes,
                                              const GetOptions& get, const CallOptions& call,
                                              const ChainContext& chain) const override;
  absl::StatusOr<uint32_t> DoDeleteBlocks(uint64_t namespace_id,
                                          absl::Span<const std::string> hashes,
                                          const CallOptions& call,
                                          const ChainContext& chain) const override;
  absl::StatusOr<uint64_t> DoDropNamespace(uint64_t namespace_id,
                                           const CallOptions& call) const override;
  absl::StatusOr<ServerStats> DoStats(const CallOptions& call) const override;

  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "0123456789abcdef": namespace ids are shown and parsed as 16 lower-case hex digits.
std::string FormatNamespaceId(uint64_t namespace_id);
// Accepts exactly 16 hex digits (either case), with or without "0x". InvalidArgument
// otherwise, naming the text given.
[[nodiscard]] absl::StatusOr<uint64_t> ParseNamespaceId(absl::string_view text);

}  // namespace turbokv::client

#endif  // TURBOKV_CLIENT_CLIENT_H_
