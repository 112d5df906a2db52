#include "commands.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"
#include "kv_layout.h"
#include "npy.h"
#include "text_table.h"
#include "turbokv/client/prefix_hasher.h"
#include "turbokv/codec/status_macros.h"
#include "turbokv/codec/types.h"

namespace turbokv::cli {
namespace {

using Client = client::ShardedClient;
using client::DType;
using client::NamespaceDescriptor;

// Blocks per PutBlocks / GetBlocks call: bounds the memory and the duration of one stream.
constexpr size_t kBlocksPerCall = 32;
// Lease taken by `get` between its Lookup and its GetBlocks.
constexpr uint32_t kGetLeaseSeconds = 60;

client::CallOptions Call(const GlobalOptions& g) {
  return client::CallOptions{absl::Seconds(g.timeout_seconds)};
}

// Token ids from an int32 or int64 [T] npy file, as uint32.
absl::StatusOr<std::vector<uint32_t>> LoadTokens(const std::string& path) {
  TURBOKV_ASSIGN_OR_RETURN(NpyArray arr, ReadNpy(path));
  if (arr.shape.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tokens must be a 1-D array, got ", arr.shape.size(), " dimensions"));
  }
  std::vector<uint32_t> out(arr.shape[0]);
  if (arr.descr == "<i4") {
    for (size_t i = 0; i < out.size(); ++i) {
      int32_t v;
      std::memcpy(&v, arr.data.data() + 4 * i, 4);
      if (v < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": token ", i, " is negative (", v, ")"));
      }
      out[i] = static_cast<uint32_t>(v);
    }
  } else if (arr.descr == "<i8") {
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t v;
      std::memcpy(&v, arr.data.data() + 8 * i, 8);
      if (v < 0 || v > int64_t{0xffffffff}) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": token ", i, " = ", v, " is outside [0, 2^32)"));
      }
      out[i] = static_cast<uint32_t>(v);
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tokens must be int32 (<i4) or int64 (<i8), got '", arr.descr, "'"));
  }
  return out;
}

// The descriptor of a registered namespace, from Stats. NotFound when the server lacks it.
absl::StatusOr<NamespaceDescriptor> FindNamespace(const GlobalOptions& g, const Client& c,
                                                  uint64_t id) {
  TURBOKV_ASSIGN_OR_RETURN(client::ServerStats stats, c.Stats(Call(g)));
  for (const client::NamespaceStats& ns : stats.namespaces) {
    if (ns.namespace_id == id) return ns.descriptor;
  }
  return absl::NotFoundError(absl::StrCat("namespace ", client::FormatNamespaceId(id),
                                          " is not registered on the server"));
}

// The npy descr that holds raw values of `dtype` (bf16 travels as uint16).
const char* NpyDescr(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "<f4";
    case DType::kBFloat16:
      return "<u2";
    default:
      return "<f2";
  }
}

absl::StatusOr<std::vector<std::string>> HashTokens(const NamespaceDescriptor& d, uint64_t id,
                                                    absl::Span<const uint32_t> tokens) {
  return client::PrefixHasher(id).BlockHashes(tokens, static_cast<int>(d.block_tokens));
}

struct NsRegisterArgs {
  NamespaceDescriptor d;
  std::string dtype = "fp16";
  std::string preset;
};

// "4-bit g=32", "4-bit g=32 + QJL", "fp16", "raw".
std::string SectionSummary(const client::SectionCodec& c) {
  if (c.bits == 0) return "raw";
  if (c.bits == 16) return "fp16";
  return absl::StrCat(c.bits, "-bit g=", c.group_size, c.qjl ? " + QJL" : "");
}

// The resolved codec of a canonical descriptor, for people: "K 4-bit g=32, V 4-bit g=32".
std::string CodecSummary(const client::CodecConfig& c) {
  const client::SectionCodec k = c.key.value_or(client::SectionCodec{});
  const client::SectionCodec v = c.value.value_or(client::SectionCodec{});
  if (k.bits == 0 && v.bits == 0) return "raw (stored verbatim)";
  std::string out = absl::StrCat("K ", SectionSummary(k), ", V ", SectionSummary(v));
  if (c.protected_first_layers > 0 || c.protected_last_layers > 0) {
    absl::StrAppend(&out, "; first ", c.protected_first_layers, " and last ",
                    c.protected_last_layers, " layers at ",
                    c.protected_bits == 16 ? "fp16" : "8-bit");
  }
  if (c.disable_norm_correction) absl::StrAppend(&out, "; norm correction off");
  return out;
}

// A note when the server shrank a preset's group size to fit head_dim (bpv then grows: every
// group carries a 16-bit scale), or "" when the preset applies as named.
std::string GroupShrinkNote(const std::string& preset, const NamespaceDescriptor& resolved) {
  if (preset.empty() || !resolved.codec.key || !resolved.codec.value) return "";
  // The preset's nominal groups: its groups at a head_dim every nominal size divides.
  absl::StatusOr<codec::CodecSpec> nominal = codec::PresetSpec(preset, 256);
  if (!nominal.ok()) return "";
  std::vector<std::string> parts;
  auto check = [&](const char* name, const codec::SectionCodec& want,
                   const client::SectionCodec& got) {
    if (want.bits >= 1 && want.bits <= 8 && want.group_size != 256 &&
        static_cast<uint32_t>(want.group_size) != got.group_size) {
      parts.push_back(absl::StrCat(name, " group size ", want.group_size, " -> ", got.group_size));
    }
  };
  check("K", nominal->key, *resolved.codec.key);
  check("V", nominal->value, *resolved.codec.value);
  if (parts.empty()) return "";
  return absl::StrCat("preset ", preset, " does not fit head_dim ", resolved.head_dim,
                      " as named (", absl::StrJoin(parts, ", "),
                      "): smaller groups carry more scale bytes per value");
}

absl::Status RunNsRegister(const GlobalOptions& g, const Client& c, NsRegisterArgs a) {
  TURBOKV_ASSIGN_OR_RETURN(a.d.dtype, client::ParseDType(a.dtype));
  a.d.codec.preset = a.preset;
  TURBOKV_ASSIGN_OR_RETURN(client::NamespaceInfo info, c.RegisterNamespace(a.d, Call(g)));
  const std::string note = GroupShrinkNote(a.preset, info.descriptor);
  JsonObject o;
  o.Add("namespace_id", client::FormatNamespaceId(info.namespace_id))
      .Add("created", info.created)
      .Add("codec", CodecSummary(info.descriptor.codec))
      .Add("raw_block_bytes", info.raw_block_bytes)
      .Add("packed_block_bytes", info.packed_block_bytes)
      .Add("bits_per_value", info.bits_per_value)
      .Add("compression_ratio",
           info.packed_block_bytes ? double(info.raw_block_bytes) / info.packed_block_bytes : 0.0);
  if (!note.empty()) o.Add("note", note);
  Emit(g, o);
  return absl::OkStatus();
}

// "[num_layers][2][block_tokens][num_kv_heads][head_dim]" of a namespace's blocks.
std::string BlockShape(const NamespaceDescriptor& d) {
  return absl::StrCat("[", d.num_layers, "][2][", d.block_tokens, "][", d.num_kv_heads, "][",
                      d.head_dim, "]");
}

// "never", or "3600 s": blocks expire this long after their last put or get.
std::string TtlSummary(const NamespaceDescriptor& d) {
  const uint32_t ttl = d.ttl_seconds.value_or(0);
  return ttl == 0 ? "never" : absl::StrCat(ttl, " s");
}

// One row per namespace, for `ns list` and `stats` without --json.
std::string NamespaceTable(const std::vector<client::NamespaceStats>& namespaces) {
  using Align = TextTable::Align;
  TextTable t({{"NAMESPACE"},
               {"MODEL"},
               {"DTYPE"},
               {"BLOCK SHAPE"},
               {"TP"},
               {"TTL"},
               {"BLOCKS", Align::kRight},
               {"STORED", Align::kRight},
               {"LOGICAL", Align::kRight},
               {"CODEC"}});
  for (const client::NamespaceStats& ns : namespaces) {
    const NamespaceDescriptor& d = ns.descriptor;
    std::string model = d.model.empty() ? "-" : d.model;
    if (!d.model_revision.empty()) absl::StrAppend(&model, "@", d.model_revision);
    t.AddRow({client::FormatNamespaceId(ns.namespace_id), model, client::DTypeName(d.dtype),
              BlockShape(d), d.tp_size > 1 ? absl::StrCat(d.tp_rank, "/", d.tp_size) : "-",
              TtlSummary(d), absl::StrCat(ns.blocks), FormatByteSize(ns.stored_bytes),
              FormatByteSize(ns.logical_bytes), CodecSummary(d.codec)});
  }
  return t.rows() == 0 ? "no namespaces\n" : t.Render();
}

absl::Status RunNsList(const GlobalOptions& g, const Client& c) {
  TURBOKV_ASSIGN_OR_RETURN(client::ServerStats s, c.Stats(Call(g)));
  if (!g.json) {
    std::cout << NamespaceTable(s.namespaces) << std::flush;
    return absl::OkStatus();
  }
  std::vector<JsonObject> rows;
  for (const client::NamespaceStats& ns : s.namespaces) {
    const NamespaceDescriptor& d = ns.descriptor;
    JsonObject n;
    n.Add("namespace_id", client::FormatNamespaceId(ns.namespace_id))
        .Add("model", d.model)
        .Add("model_revision", d.model_revision)
        .Add("dtype", client::DTypeName(d.dtype))
        .Add("block_shape", BlockShape(d))
        .Add("tp_rank", d.tp_rank)
        .Add("tp_size", d.tp_size)
        .Add("codec", CodecSummary(d.codec))
        .Add("ttl_seconds", d.ttl_seconds.value_or(0))
        .Add("blocks", ns.blocks)
        .Add("stored_bytes", ns.stored_bytes)
        .Add("logical_bytes", ns.logical_bytes);
    rows.push_back(std::move(n));
  }
  JsonObject o;
  o.Add("count", uint64_t{s.namespaces.size()}).AddArray("namespaces", rows);
  Emit(g, o);
  return absl::OkStatus();
}

// Progress of a put or get on stderr, one line rewritten in place.
class Progress {
 public:
  Progress(const GlobalOptions& g, const char* verb, size_t total)
      : on_(ShowProgress(g) && total > 0), verb_(verb), total_(total) {}
  void Update(size_t done, uint64_t bytes) const {
    if (!on_) return;
    std::cerr << "\r" << verb_ << ": " << done << "/" << total_ << " blocks, "
              << absl::StrFormat("%.1f", static_cast<double>(bytes) / (1 << 20)) << " MiB"
              << std::flush;
  }
  ~Progress() {
    if (on_) std::cerr << std::endl;
  }

 private:
  const bool on_;
  const char* verb_;
  const size_t total_;
};

struct PutArgs {
  std::string ns, kv, tokens;
};

absl::Status RunPut(const GlobalOptions& g, const Client& c, const PutArgs& a) {
  TURBOKV_ASSIGN_OR_RETURN(uint64_t id, client::ParseNamespaceId(a.ns));
  TURBOKV_ASSIGN_OR_RETURN(NamespaceDescriptor d, FindNamespace(g, c, id));
  TURBOKV_ASSIGN_OR_RETURN(std::vector<uint32_t> tokens, LoadTokens(a.tokens));
  TURBOKV_ASSIGN_OR_RETURN(NpyArray kv, ReadNpy(a.kv));
  if (kv.descr != NpyDescr(d.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(a.kv, ": dtype '", kv.descr, "' does not match the namespace dtype ",
                     client::DTypeName(d.dtype), " (expected '", NpyDescr(d.dtype), "')"));
  }
  const std::vector<uint64_t> want = {d.num_layers, 2, tokens.size(), d.num_kv_heads, d.head_dim};
  if (kv.shape != want) {
    return absl::InvalidArgumentError(absl::StrCat(a.kv, ": shape (", absl::StrJoin(kv.shape, ", "),
                                                   ") is not [num_layers][2][T]"
                                                   "[num_kv_heads][head_dim] = (",
                                                   absl::StrJoin(want, ", "),
                                                   ") with T = ", tokens.size(), " tokens"));
  }
  const KvShape seq{d.num_layers, tokens.size(), d.num_kv_heads, d.head_dim,
                    client::DTypeSize(d.dtype)};
  TURBOKV_ASSIGN_OR_RETURN(std::vector<std::string> blocks,
                           SplitBlocks(kv.data, seq, d.block_tokens));
  TURBOKV_ASSIGN_OR_RETURN(std::vector<std::string> hashes, HashTokens(d, id, tokens));
  const uint64_t dropped = tokens.size() % d.block_tokens;
  if (dropped != 0 && !g.json) {
    std::cerr << "turbokv: note: the trailing " << dropped << " tokens do not fill a block of "
              << d.block_tokens << " and are not stored" << std::endl;
  }
  uint64_t stored = 0, stored_bytes = 0, logical_bytes = 0;
  absl::Status first_failure;
  Progress progress(g, "put", blocks.size());
  for (size_t begin = 0; begin < blocks.size(); begin += kBlocksPerCall) {
    const size_t end = std::min(blocks.size(), begin + kBlocksPerCall);
    std::vector<absl::Span<const uint8_t>> spans;
    for (size_t i = begin; i < end; ++i) {
      spans.emplace_back(reinterpret_cast<const uint8_t*>(blocks[i].data()), blocks[i].size());
    }
    // Each call carries its place in the chain: the cluster places blocks by segment.
    TURBOKV_ASSIGN_OR_RETURN(client::ChainContext chain, c.ContextOf(hashes, begin));
    TURBOKV_ASSIGN_OR_RETURN(
        std::vector<client::BlockPutResult> res,
        c.PutBlocks(id, absl::MakeConstSpan(hashes).subspan(begin, end - begin), spans,
                    client::Encoding::kRaw, Call(g), chain));
    for (size_t i = 0; i < res.size(); ++i) {
      if (res[i].status.ok()) {
        ++stored;
        stored_bytes += res[i].stored_bytes;
        logical_bytes += blocks[begin + i].size();
      } else if (first_failure.ok()) {
        first_failure = absl::Status(
            res[i].status.code(), absl::StrCat("block ", begin + i, ": ", res[i].status.message()));
      }
    }
    progress.Update(end, logical_bytes);
  }
  JsonObject o;
  o.Add("namespace_id", client::FormatNamespaceId(id))
      .Add("tokens", uint64_t{tokens.size()})
      .Add("blocks_sent", uint64_t{blocks.size()})
      .Add("blocks_stored", stored)
      .Add("dropped_tokens", dropped)
      .Add("logical_bytes", logical_bytes)
      .Add("stored_bytes", stored_bytes)
      .Add("compression_ratio", stored_bytes ? double(logical_bytes) / stored_bytes : 0.0);
  if (first_failure.ok()) {
    Emit(g, o);
    return absl::OkStatus();
  }
  const uint64_t not_stored = blocks.size() - stored;
  absl::Status failure(first_failure.code(),
                       absl::StrCat(not_stored, " of ", blocks.size(),
                                    not_stored == 1 ? " block was" : " blocks were",
                                    " not stored; first: ", first_failure.message()));
  if (!g.json) {
    Emit(g, o);
    return failure;
  }
  // --json prints exactly one object: the result, with the failure inside it.
  JsonObject err;
  err.Add("code", absl::StatusCodeToString(failure.code())).Add("message", failure.message());
  o.Add("error", err);
  Emit(g, o);
  return MarkReported(failure);
}

struct LookupArgs {
  std::string ns, tokens;
  uint32_t lease_seconds = 0;
};

absl::Status RunLookup(const GlobalOptions& g, const Client& c, const LookupArgs& a) {
  TURBOKV_ASSIGN_OR_RETURN(uint64_t id, client::ParseNamespaceId(a.ns));
  TURBOKV_ASSIGN_OR_RETURN(NamespaceDescriptor d, FindNamespace(g, c, id));
  TURBOKV_ASSIGN_OR_RETURN(std::vector<uint32_t> tokens, LoadTokens(a.tokens));
  TURBOKV_ASSIGN_OR_RETURN(std::vector<std::string> hashes, HashTokens(d, id, tokens));
  TURBOKV_ASSIGN_OR_RETURN(client::LookupResult r, c.Lookup(id, hashes, a.lease_seconds, Call(g)));
  JsonObject o;
  o.Add("namespace_id", client::FormatNamespaceId(id))
      .Add("chain_blocks", uint64_t{hashes.size()})
      .Add("matched_blocks", r.matched_blocks)
      .Add("matched_tokens", r.matched_tokens);
  Emit(g, o);
  return absl::OkStatus();
}

struct GetArgs {
  std::string ns, tokens, out, dtype, layers;
  bool packed = false;
};

absl::Status RunGet(const GlobalOptions& g, const Client& c, const GetArgs& a) {
  TURBOKV_ASSIGN_OR_RETURN(uint64_t id, client::ParseNamespaceId(a.ns));
  TURBOKV_ASSIGN_OR_RETURN(NamespaceDescriptor d, FindNamespace(g, c, id));
  TURBOKV_ASSIGN_OR_RETURN(std::vector<uint32_t> tokens, LoadTokens(a.tokens));
  TURBOKV_ASSIGN_OR_RETURN(std::vector<std::string> hashes, HashTokens(d, id, tokens));
  client::GetOptions opt;
  opt.encoding = a.packed ? client::Encoding::kPacked : client::Encoding::kRaw;
  if (!a.dtype.empty()) {
    if (a.packed) return absl::InvalidArgumentError("--dtype does not apply to --packed");
    TURBOKV_ASSIGN_OR_RETURN(opt.dtype, client::ParseDType(a.dtype));
  }
  if (!a.layers.empty()) {
    if (a.packed) return absl::InvalidArgumentError("--layers does not apply to --packed");
    std::vector<std::string> parts = absl::StrSplit(a.layers, ':');
    uint32_t begin = 0, end = d.num_layers;
    if (parts.size() != 2 || (!parts[0].empty() && !absl::SimpleAtoi(parts[0], &begin)) ||
        (!parts[1].empty() && !absl::SimpleAtoi(parts[1], &end)) || begin >= end ||
        end > d.num_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("--layers \"", a.layers, "\" is not A:B with 0 <= A < B <= ", d.num_layers));
    }
    opt.layer_begin = begin;
    opt.layer_end = end;
  }
  TURBOKV_ASSIGN_OR_RETURN(client::LookupResult m, c.Lookup(id, hashes, kGetLeaseSeconds, Call(g)));
  // Fetch the matched prefix; a block evicted between Lookup and GetBlocks ends the prefix.
  std::vector<std::string> blocks;
  DType dtype = opt.dtype == DType::kUnspecified ? d.dtype : opt.dtype;
  bool gap = false;
  uint64_t fetched_bytes = 0;
  Progress progress(g, "get", m.matched_blocks);
  for (size_t begin = 0; begin < m.matched_blocks && !gap; begin += kBlocksPerCall) {
    const size_t end = std::min<size_t>(m.matched_blocks, begin + kBlocksPerCall);
    TURBOKV_ASSIGN_OR_RETURN(client::ChainContext chain, c.ContextOf(hashes, begin));
    TURBOKV_ASSIGN_OR_RETURN(
        client::GetBlocksResult r,
        c.GetBlocks(id, absl::MakeConstSpan(hashes).subspan(begin, end - begin), opt, Call(g),
                    chain));
    if (!a.packed && r.dtype != DType::kUnspecified) dtype = r.dtype;
    for (auto& b : r.blocks) {
      if (!b) {
        gap = true;
        break;
      }
      fetched_bytes += b->size();
      blocks.push_back(std::move(*b));
    }
    progress.Update(blocks.size(), fetched_bytes);
  }
  NpyArray out;
  const uint64_t n = blocks.size();
  if (a.packed) {
    // All packed blocks of a namespace have the same size: one uint8 [n][packed_bytes] array.
    const uint64_t p = n ? blocks[0].size() : 0;
    for (const std::string& b : blocks) {
      if (b.size() != p) {
        return absl::DataLossError("packed blocks of one namespace differ in size");
      }
      out.data += b;
    }
    out.descr = "|u1";
    out.shape = {n, p};
  } else {
    const uint64_t layers = (opt.layer_end ? opt.layer_end : d.num_layers) - opt.layer_begin;
    const KvShape block{layers, d.block_tokens, d.num_kv_heads, d.head_dim,
                        client::DTypeSize(dtype)};
    TURBOKV_ASSIGN_OR_RETURN(out.data, JoinBlocks(blocks, block));
    out.descr = NpyDescr(dtype);
    out.shape = {layers, 2, n * d.block_tokens, d.num_kv_heads, d.head_dim};
  }
  TURBOKV_RETURN_IF_ERROR(WriteNpy(a.out, out));
  JsonObject o;
  o.Add("namespace_id", client::FormatNamespaceId(id))
      .Add("chain_blocks", uint64_t{hashes.size()})
      .Add("matched_blocks", n)
      .Add("matched_tokens", n * d.block_tokens)
      .Add("encoding", a.packed ? "packed" : "raw")
      .Add("dtype", a.packed ? "uint8" : client::DTypeName(dtype))
      .Add("shape", absl::StrCat("[", absl::StrJoin(out.shape, ","), "]"))
      .Add("bytes", uint64_t{out.data.size()})
      .Add("out", a.out);
  Emit(g, o);
  return absl::OkStatus();
}

absl::Status RunStats(const GlobalOptions& g, const Client& c) {
  TURBOKV_ASSIGN_OR_RETURN(client::ServerStats s, c.Stats(Call(g)));
  JsonObject o;
  o.Add("version", s.version)
      .Add("codec_backend", s.codec_backend)
      .Add("durability", s.durability)
      .Add("capacity_bytes", s.capacity_bytes)
      .Add("used_bytes", s.used_bytes)
      .Add("stored_bytes", s.stored_bytes)
      .Add("blocks", s.blocks)
      .Add("logical_bytes", s.logical_bytes)
      .Add("compression_ratio", s.stored_bytes ? double(s.logical_bytes) / s.stored_bytes : 0.0)
      .Add("evicted_blocks", s.evicted_blocks)
      .Add("checksum_failures", s.checksum_failures);
  // Over several servers, the figures are sums over the nodes that answered: say which did not.
  std::vector<JsonObject> unanswered;
  for (const auto& [node, status] : s.unanswered_nodes) {
    std::cerr << "turbokv: warning: node " << node << " did not answer (" << status.ToString()
              << "); the figures leave it out\n";
    unanswered.push_back(JsonObject().Add("node", node).Add("error", status.ToString()));
  }
  if (!unanswered.empty()) o.AddArray("unanswered_nodes", unanswered);
  if (!g.json) {
    // The server's figures as "key: value" lines, then the namespaces as a table.
    Emit(g, o);
    std::cout << "namespaces: " << s.namespaces.size() << "\n"
              << (s.namespaces.empty() ? "" : NamespaceTable(s.namespaces)) << std::flush;
    return absl::OkStatus();
  }
  std::vector<JsonObject> nss;
  for (const client::NamespaceStats& ns : s.namespaces) {
    JsonObject n;
    n.Add("namespace_id", client::FormatNamespaceId(ns.namespace_id))
        .Add("model", ns.descriptor.model)
        .Add("dtype", client::DTypeName(ns.descriptor.dtype))
        .Add("num_layers", ns.descriptor.num_layers)
        .Add("num_kv_heads", ns.descriptor.num_kv_heads)
        .Add("head_dim", ns.descriptor.head_dim)
        .Add("block_tokens", ns.descriptor.block_tokens)
        .Add("ttl_seconds", ns.descriptor.ttl_seconds.value_or(0))
        .Add("blocks", ns.blocks)
        .Add("stored_bytes", ns.stored_bytes)
        .Add("logical_bytes", ns.logical_bytes);
    nss.push_back(std::move(n));
  }
  o.AddArray("namespaces", nss);
  Emit(g, o);
  return absl::OkStatus();
}

struct DropArgs {
  std::string ns;
};

absl::Status RunNsDrop(const GlobalOptions& g, const Client& c, const DropArgs& a) {
  TURBOKV_ASSIGN_OR_RETURN(uint64_t id, client::ParseNamespaceId(a.ns));
  TURBOKV_ASSIGN_OR_RETURN(uint64_t deleted, c.DropNamespace(id, Call(g)));
  JsonObject o;
  o.Add("namespace_id", client::FormatNamespaceId(id)).Add("deleted_blocks", deleted);
  Emit(g, o);
  return absl::OkStatus();
}

struct DeleteArgs {
  std::string ns, tokens;
};

// Deletes the full blocks of a prompt (the blocks `put` stores for the same tokens).
absl::Status RunDelete(const GlobalOptions& g, const Client& c, const DeleteArgs& a) {
  TURBOKV_ASSIGN_OR_RETURN(uint64_t id, client::ParseNamespaceId(a.ns));
  TURBOKV_ASSIGN_OR_RETURN(NamespaceDescriptor d, FindNamespace(g, c, id));
  TURBOKV_ASSIGN_OR_RETURN(std::vector<uint32_t> tokens, LoadTokens(a.tokens));
  TURBOKV_ASSIGN_OR_RETURN(std::vector<std::string> hashes, HashTokens(d, id, tokens));
  TURBOKV_ASSIGN_OR_RETURN(uint32_t deleted, c.DeleteBlocks(id, hashes, Call(g)));
  JsonObject o;
  o.Add("namespace_id", client::FormatNamespaceId(id))
      .Add("chain_blocks", static_cast<uint64_t>(hashes.size()))
      .Add("deleted_blocks", static_cast<uint64_t>(deleted));
  Emit(g, o);
  return absl::OkStatus();
}

constexpr char kReportedPayload[] = "turbokv.cli/reported";

}  // namespace

bool ShowProgress(const GlobalOptions& g) {
  if (g.progress == "always") return true;
  if (g.progress == "never") return false;
  return !g.json && isatty(STDERR_FILENO);
}

absl::Status MarkReported(absl::Status status) {
  status.SetPayload(kReportedPayload, absl::Cord("1"));
  return status;
}

bool IsReported(const absl::Status& status) {
  return status.GetPayload(kReportedPayload).has_value();
}

void Emit(const GlobalOptions& g, const JsonObject& obj) {
  if (g.json) {
    std::cout << obj.Dump() << std::endl;
  } else {
    std::cout << obj.Human() << std::flush;
  }
}

void AddNamespaceCommands(CLI::App& app, Action* action) {
  CLI::App* ns = app.add_subcommand("ns", "namespace commands");
  ns->require_subcommand(1);
  CLI::App* reg = ns->add_subcommand("register", "register (or find) a namespace");
  auto a = std::make_shared<NsRegisterArgs>();
  reg->add_option("--model", a->d.model, "model id")->required();
  reg->add_option("--model-revision", a->d.model_revision, "weights revision");
  reg->add_option("--num-layers", a->d.num_layers, "layers of the model")
      ->required()
      ->check(CLI::Range(1, 65535));
  reg->add_option("--num-kv-heads", a->d.num_kv_heads,
                  "KV heads stored in this namespace: the model's, divided by --tp-size")
      ->required()
      ->check(CLI::Range(1, 65535));
  reg->add_option("--head-dim", a->d.head_dim,
                  "values per head (the preset may need a multiple of its group)")
      ->required()
      ->check(CLI::Range(1, 65535));
  reg->add_option("--block-tokens", a->d.block_tokens, "tokens per block")
      ->required()
      ->check(CLI::Range(1, 65535));
  reg->add_option("--dtype", a->dtype, "fp16, bf16 or fp32")->capture_default_str();
  reg->add_option("--preset", a->preset,
                  absl::StrCat("codec preset: ", absl::StrJoin(codec::PresetNames(), ", "),
                               " (empty: the server's --default-preset)"));
  reg->add_option("--tp-rank", a->d.tp_rank,
                  "tensor-parallel rank of this shard, 0..tp-size-1 (default 0)")
      ->check(CLI::Range(0, 65535));
  reg->add_option("--tp-size", a->d.tp_size,
                  "tensor-parallel size (default 0; 0 and 1 both mean unsharded)")
      ->check(CLI::Range(0, 65535));
  reg->add_option("--cache-salt", a->d.cache_salt,
                  "tenant / cache salt, part of the namespace id: another salt is another, "
                  "empty namespace (default empty)");
  reg->add_option("--ttl-seconds", a->d.ttl_seconds,
                  "blocks expire this long after their last put or get; 0 = never "
                  "(unset: a new namespace never expires, an existing one keeps its TTL)")
      ->check(CLI::Range(int64_t{0}, int64_t{UINT32_MAX}));
  reg->callback([a, action] {
    *action = [a](const GlobalOptions& g, const Client& c) { return RunNsRegister(g, c, *a); };
  });
  CLI::App* list = ns->add_subcommand(
      "list", "list the registered namespaces (shape, TTL, blocks, bytes, codec)");
  list->callback([action] { *action = RunNsList; });
  CLI::App* drop =
      ns->add_subcommand("drop", "delete a namespace and all its blocks (on every node)");
  auto d = std::make_shared<DropArgs>();
  drop->add_option("--namespace", d->ns, "namespace id (16 hex digits)")->required();
  drop->callback([d, action] {
    *action = [d](const GlobalOptions& g, const Client& c) { return RunNsDrop(g, c, *d); };
  });
}

void AddDeleteCommand(CLI::App& app, Action* action) {
  CLI::App* del = app.add_subcommand("delete", "delete the stored full blocks of a prompt");
  auto a = std::make_shared<DeleteArgs>();
  del->add_option("--namespace", a->ns, "namespace id (16 hex digits)")->required();
  del->add_option("--tokens", a->tokens, "TOKENS.npy int32/int64 [T]")
      ->required()
      ->check(CLI::ExistingFile);
  del->callback([a, action] {
    *action = [a](const GlobalOptions& g, const Client& c) { return RunDelete(g, c, *a); };
  });
}

void AddPutCommand(CLI::App& app, Action* action) {
  CLI::App* put = app.add_subcommand(
      "put", "store the full blocks of a KV tensor [L][2][T][H][D] under its token prefix");
  auto a = std::make_shared<PutArgs>();
  put->add_option("--namespace", a->ns, "namespace id (16 hex digits)")->required();
  put->add_option("--kv", a->kv, "KV.npy [num_layers][2][T][num_kv_heads][head_dim]")
      ->required()
      ->check(CLI::ExistingFile);
  put->add_option("--tokens", a->tokens, "TOKENS.npy int32/int64 [T]")
      ->required()
      ->check(CLI::ExistingFile);
  put->callback([a, action] {
    *action = [a](const GlobalOptions& g, const Client& c) { return RunPut(g, c, *a); };
  });
}

void AddLookupCommand(CLI::App& app, Action* action) {
  CLI::App* lk = app.add_subcommand("lookup", "how many leading blocks of a prompt are stored");
  auto a = std::make_shared<LookupArgs>();
  lk->add_option("--namespace", a->ns, "namespace id (16 hex digits)")->required();
  lk->add_option("--tokens", a->tokens, "TOKENS.npy int32/int64 [T]")
      ->required()
      ->check(CLI::ExistingFile);
  lk->add_option("--lease-seconds", a->lease_seconds,
                 "pin the matched blocks this long (0 = no lease; up to the server's "
                 "--max-lease-seconds)")
      ->check(CLI::Range(int64_t{0}, int64_t{UINT32_MAX}));
  lk->callback([a, action] {
    *action = [a](const GlobalOptions& g, const Client& c) { return RunLookup(g, c, *a); };
  });
}

void AddGetCommand(CLI::App& app, Action* action) {
  CLI::App* get = app.add_subcommand(
      "get",
      "fetch the stored prefix of a prompt: OUT.npy [L][2][matched_tokens][H][D] (bf16 as "
      "uint16), or with --packed a uint8 [matched_blocks][packed_block_bytes] array");
  auto a = std::make_shared<GetArgs>();
  get->add_option("--namespace", a->ns, "namespace id (16 hex digits)")->required();
  get->add_option("--tokens", a->tokens, "TOKENS.npy int32/int64 [T]")
      ->required()
      ->check(CLI::ExistingFile);
  get->add_option("--out", a->out, "output .npy path")->required();
  get->add_flag("--packed", a->packed, "fetch packed blocks as stored");
  get->add_option("--dtype", a->dtype, "output dtype fp16|bf16|fp32 (default: namespace's)");
  get->add_option("--layers", a->layers, "layer range A:B (half-open)");
  get->callback([a, action] {
    *action = [a](const GlobalOptions& g, const Client& c) { return RunGet(g, c, *a); };
  });
}

void AddStatsCommand(CLI::App& app, Action* action) {
  CLI::App* st = app.add_subcommand(
      "stats", "server statistics and a table of the namespaces (--json: one object)");
  st->callback([action] { *action = RunStats; });
}

}  // namespace turbokv::cli
