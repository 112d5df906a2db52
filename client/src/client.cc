#include "turbokv/client/client.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "chunking.h"
#include "convert.h"
#include "turbokv/codec/status_macros.h"
#include "turbokv/v1/turbokv.grpc.pb.h"
#include "wire_format.h"

namespace turbokv::client {

namespace v1 = ::turbokv::v1;
using internal::FromGrpc;

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kFloat32:
      return 4;
    case DType::kUnspecified:
      break;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat16:
      return "fp16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kFloat32:
      return "fp32";
    case DType::kUnspecified:
      break;
  }
  return "unspecified";
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "fp16" || n == "float16" || n == "f16") return DType::kFloat16;
  if (n == "bf16" || n == "bfloat16") return DType::kBFloat16;
  if (n == "fp32" || n == "float32" || n == "f32") return DType::kFloat32;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype \"", name, "\"; expected fp16, bf16 or fp32"));
}

uint64_t NamespaceDescriptor::values_per_block() const {
  return uint64_t{num_layers} * 2 * block_tokens * num_kv_heads * head_dim;
}

uint64_t NamespaceDescriptor::raw_block_bytes() const {
  return values_per_block() * DTypeSize(dtype);
}

absl::Status ClientOptions::Validate() const {
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeout must be positive");
  }
  if (max_attempts < 1 || max_attempts > 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_attempts ", max_attempts, " is outside [1, 10]"));
  }
  if (initial_backoff < absl::ZeroDuration() || max_backoff < initial_backoff) {
    return absl::InvalidArgumentError("need 0 <= initial_backoff <= max_backoff");
  }
  if (backoff_multiplier < 1.0) {
    return absl::InvalidArgumentError("backoff_multiplier must be >= 1");
  }
  if (max_chunk_bytes < 1024 || max_chunk_bytes > (size_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_chunk_bytes ", max_chunk_bytes, " is outside [1024, 1048576]"));
  }
  if (connections < 1 || connections > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("connections ", connections, " is outside [1, 64]"));
  }
  if (max_receive_message_bytes < (2 << 20)) {
    return absl::InvalidArgumentError("max_receive_message_bytes must be >= 2 MiB");
  }
  if (security.cert_file.empty() != security.key_file.empty()) {
    return absl::InvalidArgumentError("security: cert_file and key_file go together");
  }
  if (!security.token.empty() && !security.token_file.empty()) {
    return absl::InvalidArgumentError("security: give token or token_file, not both");
  }
  if (max_reconnect_backoff != absl::ZeroDuration() &&
      (max_reconnect_backoff < absl::Milliseconds(100) ||
       max_reconnect_backoff > absl::Minutes(10))) {
    return absl::InvalidArgumentError("max_reconnect_backoff must be 0 or in [100 ms, 10 min]");
  }
  return absl::OkStatus();
}

std::string FormatNamespaceId(uint64_t namespace_id) {
  return absl::StrFormat("%016x", namespace_id);
}

absl::StatusOr<uint64_t> ParseNamespaceId(absl::string_view text) {
  absl::string_view t = text;
  if (absl::StartsWith(t, "0x") || absl::StartsWith(t, "0X")) t.remove_prefix(2);
  constexpr absl::string_view kExpected =
      "expected exactly 16 hex digits, as `turbokv ns register` and `ns list` print it";
  // Exactly 16 digits: a shorter id is most likely one with digits dropped by mistake, and
  // zero-padding it would address another namespace.
  if (t.size() != 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("namespace id \"", text, "\" has ", t.size(), " digits; ", kExpected));
  }
  uint64_t id = 0;
  if (!std::all_of(t.begin(), t.end(), [](char c) { return absl::ascii_isxdigit(c); }) ||
      !absl::SimpleHexAtoi(t, &id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("namespace id \"", text, "\" is not hexadecimal; ", kExpected));
  }
  return id;
}

namespace {

// The whole file, or InvalidArgument naming `what`.
absl::StatusOr<std::string> ReadSecurityFile(const char* what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(what, ": cannot read ", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ChannelCredentialsFor(
    const ClientSecurity& sec, grpc::ChannelArguments* args) {
  if (!sec.uses_tls()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!sec.ca_file.empty()) {
    TURBOKV_ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadSecurityFile("ca_file", sec.ca_file));
  }
  if (!sec.cert_file.empty()) {
    TURBOKV_ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadSecurityFile("cert_file", sec.cert_file));
    TURBOKV_ASSIGN_OR_RETURN(ssl.pem_private_key, ReadSecurityFile("key_file", sec.key_file));
  }
  if (!sec.server_name.empty()) args->SetSslTargetNameOverride(sec.server_name);
  return grpc::SslCredentials(ssl);
}

}  // namespace

struct Client::Impl {
  // One gRPC channel (one connection) and its methods.
  struct Connection {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::TurboKV::Stub> stub;
    // GetBlocks read as raw byte buffers (wire_format.h): chunks are parsed from gRPC's
    // receive slices and appended to their blocks without a copy into a message first.
    std::unique_ptr<grpc::internal::RpcMethod> get_blocks_raw;
    // PutBlocks written as raw byte buffers: a chunk is copied once, from the caller's block
    // into the outgoing slice (a protobuf message would copy it twice).
    std::unique_ptr<grpc::internal::RpcMethod> put_blocks_raw;
    // Lookup's request serialized straight from the caller's hashes (no message of 1,000
    // strings).
    std::unique_ptr<grpc::internal::RpcMethod> lookup_raw;
  };

  ClientOptions options;
  std::string authorization;            // "Bearer <token>", or empty
  std::vector<Connection> connections;  // options.connections of them
  mutable std::atomic<size_t> next_connection{0};

  // The connection of the next call (round-robin).
  const Connection& Pick() const {
    if (connections.size() == 1) return connections[0];
    return connections[next_connection.fetch_add(1, std::memory_order_relaxed) %
                       connections.size()];
  }

  absl::Time Deadline(const CallOptions& call) const {
    return absl::Now() + (call.timeout > absl::ZeroDuration() ? call.timeout : options.timeout);
  }

  // Runs `attempt(context)` until it returns anything but UNAVAILABLE, attempts run out, or
  // the next backoff would end past the deadline. Each attempt gets a fresh context carrying
  // the call's deadline.
  template <typename Attempt>
  absl::Status Retry(absl::Time deadline, Attempt&& attempt) const {
    thread_local std::minstd_rand rng(std::random_device{}());
    absl::Duration backoff = options.initial_backoff;
    absl::Status status;
    for (int i = 1;; ++i) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(deadline));
      if (!authorization.empty()) context.AddMetadata("authorization", authorization);
      status = attempt(&context);
      if (status.code() != absl::StatusCode::kUnavailable || i >= options.max_attempts) break;
      std::uniform_real_distribution<double> jitter(0.8, 1.2);
      const absl::Duration sleep = backoff * jitter(rng);
      if (absl::Now() + sleep >= deadline) break;
      absl::SleepFor(sleep);
      backoff = std::min(backoff * options.backoff_multiplier, options.max_backoff);
    }
    return status;
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

const ClientOptions& Client::options() const { return impl_->options; }

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& target,
                                                        const ClientOptions& options) {
  if (target.empty()) return absl::InvalidArgumentError("empty server target");
  TURBOKV_RETURN_IF_ERROR(options.Validate());
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_receive_message_bytes);
  // Our own retry loop handles UNAVAILABLE; gRPC's built-in retries would multiply attempts.
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
  if (options.max_reconnect_backoff > absl::ZeroDuration()) {
    const int max_ms = static_cast<int>(absl::ToInt64Milliseconds(options.max_reconnect_backoff));
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(100, max_ms));
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, std::min(100, max_ms));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_ms);
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  TURBOKV_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                           ChannelCredentialsFor(options.security, &args));
  std::string token = options.security.token;
  if (!options.security.token_file.empty()) {
    TURBOKV_ASSIGN_OR_RETURN(token, ReadSecurityFile("token_file", options.security.token_file));
    token = std::string(absl::StripAsciiWhitespace(token));
    if (token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("token_file: ", options.security.token_file, " is empty"));
    }
  }
  if (!token.empty()) impl->authorization = "Bearer " + token;
  // Channels with equal arguments share one connection (gRPC's global subchannel pool): each
  // of several gets its own pool, hence its own connection.
  if (options.connections > 1) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // The receive window of each call: 8 MiB, fixed (gRPC's default starts at 64 KiB and grows
  // with its BDP probe, so a 0.6 MiB PACKED reply waited for window updates on the way; on
  // loopback the probe measures a small BDP and the window stays small). Bounded: a call
  // receives only the blocks it asked for.
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  impl->connections.resize(static_cast<size_t>(options.connections));
  for (Impl::Connection& c : impl->connections) {
    c.channel = grpc::CreateCustomChannel(target, credentials, args);
    c.stub = v1::TurboKV::NewStub(c.channel);
    c.get_blocks_raw = std::make_unique<grpc::internal::RpcMethod>(
        "/turbokv.v1.TurboKV/GetBlocks", grpc::internal::RpcMethod::SERVER_STREAMING, c.channel);
    c.lookup_raw = std::make_unique<grpc::internal::RpcMethod>(
        "/turbokv.v1.TurboKV/Lookup", grpc::internal::RpcMethod::NORMAL_RPC, c.channel);
    c.put_blocks_raw = std::make_unique<grpc::internal::RpcMethod>(
        "/turbokv.v1.TurboKV/PutBlocks", grpc::internal::RpcMethod::CLIENT_STREAMING, c.channel);
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

absl::StatusOr<NamespaceInfo> Client::DoRegisterNamespace(const NamespaceDescriptor& descriptor,
                                                          const CallOptions& call) const {
  v1::RegisterNamespaceRequest req;
  internal::ToProto(descriptor, req.mutable_namespace_descriptor());
  v1::RegisterNamespaceResponse resp;
  TURBOKV_RETURN_IF_ERROR(impl_->Retry(impl_->Deadline(call), [&](grpc::ClientContext* ctx) {
    return FromGrpc(impl_->Pick().stub->RegisterNamespace(ctx, req, &resp));
  }));
  NamespaceInfo info;
  info.namespace_id = resp.namespace_id();
  info.created = resp.created();
  info.descriptor = internal::FromProto(resp.namespace_descriptor());
  info.raw_block_bytes = resp.raw_block_bytes();
  info.packed_block_bytes = resp.packed_block_bytes();
  info.bits_per_value = resp.bits_per_value();
  return info;
}

absl::StatusOr<std::vector<BlockPutResult>> Client::DoPutBlocks(
    uint64_t namespace_id, absl::Span<const std::string> hashes,
    absl::Span<const absl::Span<const uint8_t>> blocks, Encoding encoding, const CallOptions& call,
    const ChainContext& /*chain*/) const {
  if (hashes.size() != blocks.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PutBlocks got ", hashes.size(), " hashes but ", blocks.size(), " blocks"));
  }
  if (blocks.empty()) return std::vector<BlockPutResult>{};
  v1::PutBlocksResponse resp;
  TURBOKV_RETURN_IF_ERROR(impl_->Retry(impl_->Deadline(call), [&](grpc::ClientContext* ctx) {
    resp.Clear();
    const Impl::Connection& conn = impl_->Pick();
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            conn.channel.get(), *conn.put_blocks_raw, ctx, &resp));
    v1::PutBlocksRequest req;  // every field but data
    req.set_namespace_id(namespace_id);
    req.set_encoding(static_cast<v1::Encoding>(encoding));
    // The stream's header rides on its first message: with the block count the server reads
    // the end of the stream without reserving in-flight budget (PutBlocksHeader, proto).
    req.mutable_header()->set_block_count(blocks.size());
    // More of this chain follows in another call (a sharded client's call to another node):
    // none of these blocks is the request's last (PutBlocksHeader.chain_continues).
    req.mutable_header()->set_chain_continues(call.chain_continues);
    bool open = true;
    for (size_t i = 0; i < blocks.size() && open; ++i) {
      const absl::Span<const uint8_t> block = blocks[i];
      req.set_block_hash(hashes[i]);
      req.set_block_bytes(block.size());
      for (const internal::ChunkRange& c :
           internal::SplitIntoChunks(block.size(), impl_->options.max_chunk_bytes)) {
        req.set_offset(c.offset);
        // A failed write means the stream is broken; Finish() reports why.
        if (!writer->Write(internal::SerializeWithData(
                req, /*data_field=*/6,
                absl::string_view(reinterpret_cast<const char*>(block.data()) + c.offset,
                                  c.size)))) {
          open = false;
          break;
        }
        req.clear_header();
      }
    }
    if (open) writer->WritesDone();
    return FromGrpc(writer->Finish());
  }));
  if (static_cast<size_t>(resp.results_size()) != blocks.size()) {
    return absl::InternalError(absl::StrCat("PutBlocks returned ", resp.results_size(),
                                            " results for ", blocks.size(), " blocks"));
  }
  std::vector<BlockPutResult> out;
  out.reserve(blocks.size());
  for (v1::BlockResult& r : *resp.mutable_results()) {
    BlockPutResult b;
    b.block_hash = std::move(*r.mutable_block_hash());
    b.status = absl::Status(static_cast<absl::StatusCode>(r.code()), r.message());
    b.stored_bytes = r.stored_bytes();
    out.push_back(std::move(b));
  }
  return out;
}

absl::StatusOr<LookupResult> Client::DoLookup(uint64_t namespace_id,
                                              absl::Span<const std::string> hashes,
                                              uint32_t lease_seconds, const CallOptions& call,
                                              const ChainContext& /*chain*/) const {
  const grpc::ByteBuffer req =
      internal::SerializeLookupRequest(namespace_id, hashes, lease_seconds, call.follow_tuning);
  v1::LookupResponse resp;
  TURBOKV_RETURN_IF_ERROR(impl_->Retry(impl_->Deadline(call), [&](grpc::ClientContext* ctx) {
    const Impl::Connection& conn = impl_->Pick();
    return FromGrpc(grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, v1::LookupResponse>(
        conn.channel.get(), *conn.lookup_raw, ctx, req, &resp));
  }));
  if (resp.matched_blocks() > hashes.size()) {
    return absl::InternalError(absl::StrCat("Lookup matched ", resp.matched_blocks(),
                                            " blocks of a chain of ", hashes.size()));
  }
  LookupResult out{resp.matched_blocks(), resp.matched_tokens(), std::nullopt};
  if (resp.has_tuning()) {
    out.tuning = PolicyTuning{resp.tuning().half_life(), resp.tuning().unseen_age()};
  }
  return out;
}

absl::StatusOr<GetBlocksResult> Client::DoGetBlocks(uint64_t namespace_id,
                                                    absl::Span<const std::string> hashes,
                                                    const GetOptions& get, const CallOptions& call,
                                                    const ChainContext& /*chain*/) const {
  GetBlocksResult result;
  result.encoding = get.encoding;
  if (hashes.empty()) return result;
  v1::GetBlocksRequest req;
  req.set_namespace_id(namespace_id);
  for (const std::string& h : hashes) req.add_block_hashes(h);
  req.set_encoding(static_cast<v1::Encoding>(get.encoding));
  req.set_dtype(static_cast<v1::DType>(get.dtype));
  req.set_layer_begin(get.layer_begin);
  req.set_layer_end(get.layer_end);
  TURBOKV_RETURN_IF_ERROR(impl_->Retry(impl_->Deadline(call), [&](grpc::ClientContext* ctx) {
    internal::BlockAssembler assembler(hashes.size());
    result.dtype = DType::kUnspecified;
    const Impl::Connection& conn = impl_->Pick();
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
            conn.channel.get(), *conn.get_blocks_raw, ctx, req));
    grpc::ByteBuffer message;
    std::vector<grpc::Slice> slices;
    std::vector<absl::string_view> pieces;
    internal::WireChunk resp;
    absl::Status stream_error;
    while (stream_error.ok() && reader->Read(&message)) {
      slices.clear();
      if (!message.Dump(&slices).ok()) {
        stream_error = absl::DataLossError("GetBlocks response could not be read");
        break;
      }
      pieces.clear();
      for (const grpc::Slice& sl : slices) {
        pieces.emplace_back(reinterpret_cast<const char*>(sl.begin()), sl.size());
      }
      stream_error = internal::ParseGetBlocksResponse(pieces, &resp);
      if (!stream_error.ok()) break;
      if (!resp.found) {
        stream_error = assembler.AddMissing(resp.index);
        continue;
      }
      if (resp.encoding != static_cast<int>(get.encoding)) {
        stream_error = absl::DataLossError(
            absl::StrCat("GetBlocks block ", resp.index, " came in encoding ", resp.encoding,
                         ", requested ", static_cast<int>(get.encoding)));
        break;
      }
      if (get.encoding == Encoding::kRaw) {
        const auto dtype = static_cast<DType>(resp.dtype);
        if (result.dtype == DType::kUnspecified) result.dtype = dtype;
        if (dtype != result.dtype) {
          stream_error = absl::DataLossError("GetBlocks returned blocks of different dtypes");
          break;
        }
      }
      stream_error =
          assembler.AddChunk(resp.index, resp.block_bytes, resp.offset, resp.data, resp.data_size);
    }
    if (!stream_error.ok()) {
      ctx->TryCancel();
      reader->Finish().IgnoreError();
      return stream_error;
    }
    TURBOKV_RETURN_IF_ERROR(FromGrpc(reader->Finish()));
    return assembler.Finish(&result.blocks);
  }));
  return result;
}

absl::StatusOr<uint32_t> Client::DoDeleteBlocks(uint64_t namespace_id,
                                                absl::Span<const std::string> hashes,
                                                const CallOptions& call,
                                                const ChainContext& /*chain*/) const {
  v1::DeleteBlocksRequest req;
  req.set_namespace_id(namespace_id);
  for (const std::string& h : hashes) req.add_block_hashes(h);
  v1::DeleteBlocksResponse resp;
  TURBOKV_RETURN_IF_ERROR(impl_->Retry(impl_->Deadline(call), [&](grpc::ClientContext* ctx) {
    return FromGrpc(impl_->Pick().stub->DeleteBlocks(ctx, req, &resp));
  }));
  return resp.deleted_blocks();
}

absl::StatusOr<uint64_t> Client::DoDropNamespace(uint64_t namespace_id,
                                                 const CallOptions& call) const {
  v1::DropNamespaceRequest req;
  req.set_namespace_id(namespace_id);
  v1::DropNamespaceResponse resp;
  TURBOKV_RETURN_IF_ERROR(impl_->Retry(impl_->Deadline(call), [&](grpc::ClientContext* ctx) {
    return FromGrpc(impl_->Pick().stub->DropNamespace(ctx, req, &resp));
  }));
  return resp.deleted_blocks();
}

absl::StatusOr<ServerStats> Client::DoStats(const CallOptions& call) const {
  // The server pages its namespace list (StatsRequest.page_after); follow every page.
  v1::StatsRequest req;
  ServerStats out;
  const absl::Time deadline = impl_->Deadline(call);
  for (int page = 0;; ++page) {
    v1::StatsResponse resp;
    TURBOKV_RETURN_IF_ERROR(impl_->Retry(deadline, [&](grpc::ClientContext* ctx) {
      return FromGrpc(impl_->Pick().stub->Stats(ctx, req, &resp));
    }));
    ServerStats part = internal::FromProto(resp);
    if (page == 0) {
      out = std::move(part);
    } else {
      for (NamespaceStats& n : part.namespaces) out.namespaces.push_back(std::move(n));
    }
    if (!resp.has_next_page_after() ||
        (req.has_page_after() && resp.next_page_after() <= req.page_after())) {
      return out;
    }
    req.set_page_after(resp.next_page_after());
  }
}

}  // namespace turbokv::client
