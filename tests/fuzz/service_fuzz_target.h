// PutBlocks/GetBlocks request sequences against an in-process turbokv server (issue 10, item
// 4), shared by the libFuzzer binary (service_fuzzer.cc) and the replay test
// (service_fuzz_replay_test.cc). The fuzz input is decoded into up to 24 calls through the
// generated gRPC stub on 127.0.0.1: PutBlocks streams of RAW and PACKED blocks of three
// namespaces (raw fp16, k4v4-g32 fp16, k3v2-g32-qjl bf16) chunked in several ways, with
// dropped, duplicated, swapped, overrunning, zero-length and mis-sized chunks, bad hashes,
// encodings and namespace ids, poisoned (non-finite) RAW values, PACKED blocks with flipped
// bytes (checksum kept or recomputed); GetBlocks in both encodings with any dtype and layer
// range; Lookup with leases; DeleteBlocks; DropNamespace and re-registration; Stats.
//
// Invariants (a violation aborts, which the fuzzer reports):
//   * the server never crashes, and every call's status and every block's result is a clean
//     code (OK, INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, OUT_OF_RANGE,
//     FAILED_PRECONDITION; and DATA_LOSS for a PACKED block's checksum, docs/api.md), never
//     INTERNAL, UNKNOWN, ...;
//   * one result per block of a stream, in order; a block is acknowledged only when its
//     chunks were whole, in order and of the right sizes, and only when this process's codec
//     accepts its bytes (finite RAW values; a PACKED block that verifies and validates);
//   * a block read back (PACKED: byte for byte; RAW: the local decode of those bytes in the
//     requested dtype and layers) is the last acknowledged put of its hash, a put whose
//     outcome was not seen (its stream failed) since then, or a miss (eviction); after an
//     acknowledged delete or drop, a miss; GetBlocks' chunks reassemble exactly;
//   * Lookup never matches more blocks than asked.
// The server persists across inputs (as does the model of what it holds), on a temporary data
// directory, with a 4 MiB capacity so that eviction runs.
#ifndef TURBOKV_TESTS_FUZZ_SERVICE_FUZZ_TARGET_H_
#define TURBOKV_TESTS_FUZZ_SERVICE_FUZZ_TARGET_H_

#include <grpcpp/grpcpp.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "server/server.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/v1/turbokv.grpc.pb.h"
#include "xxhash.h"

namespace turbokv::server::fuzz {

// Aborts with a message: the fuzzer's (and the replay test's) failure.
[[noreturn]] inline void Violation(const std::string& what) {
  std::fprintf(stderr, "service fuzz invariant violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Reads the fuzz input; past its end every read is 0.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v = v << 8 | Byte();
    return v;
  }
  uint32_t Below(uint32_t n) { return n == 0 ? 0 : Byte() % n; }
  bool Done() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

class ServiceFuzzer {
 public:
  static constexpr int kNamespaces = 3;
  static constexpr int kHashes = 24;  // a small hash space: duplicates and overwrites

  // What the inputs so far did (the replay test prints it).
  struct Counts {
    uint64_t calls = 0, acked = 0, refused = 0, failed_streams = 0, checked = 0, misses = 0;
  };
  const Counts& counts() const { return counts_; }

  static ServiceFuzzer& Get() {
    static ServiceFuzzer* f = new ServiceFuzzer();  // never destroyed (libFuzzer exits)
    return *f;
  }

  // The replay test stops the server and removes its directory at the end.
  void Shutdown() {
    if (server_ != nullptr) server_->Shutdown();
    server_.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  void Run(const uint8_t* data, size_t size) {
    Input in(data, size);
    for (int op = 0; op < 24 && !in.Done(); ++op) {
      ++counts_.calls;
      switch (in.Below(12)) {
        case 0:
        case 1:
        case 2:
        case 3:
        case 4:
          PutStream(in);
          break;
        case 5:
        case 6:
        case 7:
          GetBlocks(in);
          break;
        case 8:
          Lookup(in);
          break;
        case 9:
          Delete(in);
          break;
        case 10:
          DropAndRegister(in);
          break;
        case 11:
          Stats();
          break;
      }
    }
  }

 private:
  // What the model knows of one (namespace, hash): the packed bytes of the last acknowledged
  // put (none: absent, after a delete or before any put) and the packed bytes of puts since
  // then whose outcome was not seen.
  struct Known {
    std::optional<std::string> acked;
    std::vector<std::string> possible;
  };
  struct Ns {
    v1::NamespaceDescriptor descriptor;
    uint64_t id = 0;
    uint64_t raw_bytes = 0, packed_bytes = 0;
    std::optional<codec::BlockCodec> codec;  // made from a packed block the server encoded
    codec::DType dtype = codec::DType::kFloat16;
    int layers = 0;
    std::map<std::string, Known> blocks;
  };

  ServiceFuzzer() {
    char tmpl[] = "/tmp/turbokv-service-fuzz-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) Violation("mkdtemp failed");
    dir_ = tmpl;
    // libFuzzer exits without destroying the fuzzer: the data directory goes at exit (a
    // violation aborts and keeps it).
    static std::string* exit_dir = new std::string(dir_);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(*exit_dir, ec);
    });
    ServerOptions o;
    o.listen_address = "127.0.0.1:0";
    o.metrics.listen_address = "";
    o.shutdown_grace_ms = 0;
    o.storage.data_dir = dir_ + "/data";
    o.storage.capacity_bytes = uint64_t{4} << 20;
    o.storage.durability = Durability::kNone;  // speed; crashes are the fault suite's part
    o.codec.backend = CodecBackendKind::kCpu;
    o.codec.threads = 2;
    o.codec.io_threads = 2;
    o.limits.max_namespaces = 64;
    o.limits.max_lease_seconds = 5;
    o.limits.max_hashes_per_call = 64;
    o.limits.max_in_flight_bytes = uint64_t{64} << 20;
    o.limits.admission_timeout_ms = 2000;
    auto s = Server::Start(o);
    if (!s.ok()) Violation("the server did not start: " + std::string(s.status().message()));
    server_ = *std::move(s);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                       grpc::InsecureChannelCredentials());
    stub_ = v1::TurboKV::NewStub(channel);
    ns_[0].descriptor = Descriptor("raw", v1::DTYPE_FP16, 1, 1, 32, 16);
    ns_[1].descriptor = Descriptor("k4v4-g32", v1::DTYPE_FP16, 2, 2, 64, 16);
    ns_[2].descriptor = Descriptor("k3v2-g32-qjl", v1::DTYPE_BF16, 2, 1, 32, 8);
    ns_[2].descriptor.mutable_codec()->set_protected_last_layers(1);
    for (Ns& n : ns_) Register(n);
  }

  static v1::NamespaceDescriptor Descriptor(const std::string& preset, v1::DType dtype, int layers,
                                            int heads, int head_dim, int tokens) {
    v1::NamespaceDescriptor d;
    d.set_model("fuzz/" + preset);
    d.set_dtype(dtype);
    d.set_num_layers(layers);
    d.set_num_kv_heads(heads);
    d.set_head_dim(head_dim);
    d.set_block_tokens(tokens);
    d.mutable_codec()->set_preset(preset);
    return d;
  }

  static std::unique_ptr<grpc::ClientContext> Context() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return c;
  }

  static bool CleanCode(int code) {
    switch (static_cast<grpc::StatusCode>(code)) {
      case grpc::StatusCode::OK:
      case grpc::StatusCode::INVALID_ARGUMENT:
      case grpc::StatusCode::NOT_FOUND:
      case grpc::StatusCode::RESOURCE_EXHAUSTED:
      case grpc::StatusCode::OUT_OF_RANGE:
      case grpc::StatusCode::FAILED_PRECONDITION:
        return true;
      default:
        return false;
    }
  }
  static void ExpectClean(const grpc::Status& s, const char* call) {
    if (!CleanCode(s.error_code())) {
      Violation(std::string(call) + " returned code " + std::to_string(s.error_code()) + ": " +
                s.error_message());
    }
  }

  // Registers n (again, after a drop) and makes the local codec from a block the server
  // encoded.
  void Register(Ns& n) {
    v1::RegisterNamespaceRequest req;
    *req.mutable_namespace_descriptor() = n.descriptor;
    v1::RegisterNamespaceResponse resp;
    grpc::Status s = stub_->RegisterNamespace(Context().get(), req, &resp);
    if (!s.ok()) Violation("RegisterNamespace of a base namespace failed: " + s.error_message());
    n.id = resp.namespace_id();
    n.raw_bytes = resp.raw_block_bytes();
    n.packed_bytes = resp.packed_block_bytes();
    n.dtype =
        n.descriptor.dtype() == v1::DTYPE_BF16 ? codec::DType::kBFloat16 : codec::DType::kFloat16;
    n.layers = static_cast<int>(n.descriptor.num_layers());
    n.blocks.clear();
    if (n.codec.has_value()) return;
    // One RAW block under a hash outside the fuzzed space, read back PACKED.
    const std::string hash(16, '\xAB');
    const std::string raw = RawBlock(n, 12345, 0);
    v1::PutBlocksResponse put;
    auto ctx = Context();
    auto w = stub_->PutBlocks(ctx.get(), &put);
    v1::PutBlocksRequest chunk;
    chunk.set_namespace_id(n.id);
    chunk.set_block_hash(hash);
    chunk.set_encoding(v1::ENCODING_RAW);
    chunk.set_block_bytes(raw.size());
    chunk.set_data(raw);
    w->Write(chunk);
    w->WritesDone();
    s = w->Finish();
    if (!s.ok() || put.results_size() != 1 || put.results(0).code() != 0) {
      Violation("the seed block of a base namespace was not stored");
    }
    std::map<uint32_t, std::string> got;
    if (!Fetch(n, {hash}, v1::ENCODING_PACKED, 0, 0, 0, &got).ok() || got.count(0) == 0) {
      Violation("the seed block of a base namespace cannot be read back");
    }
    auto c = codec::BlockCodec::FromPacked(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(got[0].data()), got[0].size()));
    if (!c.ok()) Violation("the server's packed block does not parse: " + c.status().ToString());
    n.codec = *std::move(c);
    n.blocks[hash].acked = got[0];
  }

  // Raw block bytes of namespace n from `seed`: finite values in about [-4, 4]; poison > 0
  // puts an Inf (1), a NaN (2) or a huge-but-finite value (3) at a seeded position.
  static std::string RawBlock(const Ns& n, uint32_t seed, int poison) {
    std::string out(n.raw_bytes, '\0');
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + 1);
    const bool bf16 = n.dtype == codec::DType::kBFloat16;
    for (size_t k = 0; k + 1 < out.size(); k += 2) {
      const uint64_t r = rng();
      const uint16_t h =
          bf16 ? static_cast<uint16_t>(((r & 1) << 15) | ((125 + ((r >> 1) & 3)) << 7) |
                                       ((r >> 3) & 0x7f))
               : static_cast<uint16_t>(((r & 1) << 15) | ((13 + ((r >> 1) & 3)) << 10) |
                                       ((r >> 3) & 0x3ff));
      std::memcpy(&out[k], &h, 2);
    }
    if (poison > 0 && out.size() >= 2) {
      const size_t at = 2 * (rng() % (out.size() / 2));
      const uint16_t inf = bf16 ? 0x7F80 : 0x7C00, nan = bf16 ? 0x7FC1 : 0x7E01,
                     huge = bf16 ? 0x7F7F : 0x7BFF;
      const uint16_t v = poison == 1 ? inf : poison == 2 ? nan : huge;
      std::memcpy(&out[at], &v, 2);
    }
    return out;
  }

  // The packed form of raw under n's codec (as the server encodes it); nullopt when the codec
  // refuses it.
  static std::optional<std::string> Encode(const Ns& n, const std::string& raw) {
    std::string packed(n.codec->packed_bytes(), '\0');
    const absl::Status s = n.codec->Encode(
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(raw.data()), raw.size()),
        absl::MakeSpan(reinterpret_cast<uint8_t*>(packed.data()), packed.size()));
    if (!s.ok()) return std::nullopt;
    return packed;
  }

  // Whether packed is a block this process's codec accepts for n.
  static bool AcceptablePacked(const Ns& n, const std::string& packed) {
    const auto in =
        absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(packed.data()), packed.size());
    if (packed.size() != n.packed_bytes || !codec::VerifyPackedChecksum(in).ok()) return false;
    auto info = codec::ParsePackedBlock(in);
    if (!info.ok() || info->namespace_id != n.id) return false;
    auto c = codec::BlockCodec::FromPacked(in);
    return c.ok() && c->packed_bytes() == packed.size() && c->ValidatePackedValues(in).ok();
  }

  std::string Hash(Input& in) {
    const uint8_t h = in.Byte();
    switch (h >> 4) {  // 1 in 16 too short, 1 in 16 too long
      case 0:
        return std::string(static_cast<size_t>(in.Below(8)), 'h');  // 0..7 bytes
      case 1:
        return std::string(33 + in.Below(8), 'H');
      default:
        break;
    }
    // 16 bytes (sometimes 8 or 32) naming one of kHashes.
    const uint64_t i = (h & 31) % kHashes;
    std::string out(16, '\0');
    const uint64_t a = XXH3_64bits(&i, 8);
    std::memcpy(&out[0], &a, 8);
    std::memcpy(&out[8], &i, 8);
    if (h >> 5 == 7) out.resize(8);
    if (h >> 5 == 6) out += out;
    return out;
  }

  // One block of a PutBlocks stream as the generator made it.
  struct PutBlock {
    std::string hash;
    std::string bytes;                  // what the chunks carry (in order, when well formed)
    bool well_formed = false;           // whole, in-order chunks of the right sizes
    std::optional<std::string> stored;  // the packed bytes it would store, if acceptable
    std::vector<v1::PutBlocksRequest> chunks;
  };

  PutBlock MakeBlock(Input& in, Ns& n, uint64_t ns_id) {
    PutBlock b;
    b.hash = Hash(in);
    const bool hash_ok = b.hash.size() >= 8 && b.hash.size() <= 32;
    const uint8_t kind = in.Byte();
    const uint32_t seed = in.Byte();
    v1::Encoding enc = (kind & 1) ? v1::ENCODING_PACKED : v1::ENCODING_RAW;
    bool encoding_ok = true;
    if ((kind >> 1) % 16 == 0) {
      enc = static_cast<v1::Encoding>((kind >> 5) % 2 == 0 ? 0 : 3 + (kind >> 6));
      encoding_ok = false;
    }
    const std::string raw = RawBlock(n, seed, (kind >> 1) % 8 == 1 ? 1 + (kind >> 5) % 3 : 0);
    if (enc == v1::ENCODING_PACKED) {
      std::optional<std::string> p = Encode(n, RawBlock(n, seed, 0));
      if (!p.has_value()) Violation("the local codec refuses a finite block");
      b.bytes = *p;
      const uint8_t mutation = in.Byte();
      if (mutation % 4 == 1 || mutation % 4 == 2) {
        const size_t at = (static_cast<size_t>(mutation) * 131 + in.Byte()) % b.bytes.size();
        b.bytes[at] = static_cast<char>(b.bytes[at] ^ (1 << (mutation >> 5)));
        if (mutation % 4 == 2 && b.bytes.size() >= 8) {  // the checksum recomputed
          const uint64_t sum = XXH3_64bits(b.bytes.data(), b.bytes.size() - 8);
          std::memcpy(&b.bytes[b.bytes.size() - 8], &sum, 8);
        }
      }
      if (AcceptablePacked(n, b.bytes)) b.stored = b.bytes;
    } else {
      b.bytes = raw;
      if (encoding_ok) b.stored = Encode(n, raw);
    }
    // Chunks.
    const uint64_t total = b.bytes.size();
    const uint8_t cut = in.Byte();
    uint64_t chunk = total;
    switch (cut % 5) {
      case 1:
        chunk = (total + 1) / 2;
        break;
      case 2:
        chunk = (total + 2) / 3;
        break;
      case 3:
        chunk = 700;
        break;
      case 4:
        chunk = 4096;
        break;
      default:
        break;
    }
    std::vector<std::pair<uint64_t, std::string>> parts;  // (offset, data)
    for (uint64_t off = 0; off < total; off += chunk) {
      parts.emplace_back(off, b.bytes.substr(off, chunk));
    }
    const uint8_t m = in.Byte() % 12;
    uint64_t block_bytes = total;
    bool chunks_ok = true;
    const size_t np = parts.size();
    switch (m) {
      case 1:  // drop a chunk other than the first
        if (np >= 2) {
          parts.erase(parts.begin() + 1 + in.Below(static_cast<uint32_t>(np - 1)));
          chunks_ok = false;
        }
        break;
      case 2:  // repeat a chunk other than the first and the last (a repeated first chunk
               // starts a new block, a repeated last one is a stray chunk)
        if (np >= 3) {
          const size_t k = 1 + in.Below(static_cast<uint32_t>(np - 2));
          const std::pair<uint64_t, std::string> again = parts[k];
          parts.insert(parts.begin() + k + 1, again);
          chunks_ok = false;
        }
        break;
      case 3:  // two chunks swapped (not the first)
        if (np >= 3) {
          const size_t k = 1 + in.Below(static_cast<uint32_t>(np - 2));
          std::swap(parts[k], parts[k + 1]);
          chunks_ok = false;
        }
        break;
      case 4:  // the first chunk's block_bytes is wrong
        block_bytes = total + 1 + in.Below(3) * (total / 2);
        if (in.Byte() % 2) block_bytes = total - 1;
        chunks_ok = false;
        break;
      case 6:  // the last chunk overruns the block
        parts.back().second += std::string(1 + in.Below(4), 'x');
        chunks_ok = false;
        break;
      case 7:  // the last chunk is cut short (the block is never complete)
        parts.back().second.resize(parts.back().second.size() / 2);
        chunks_ok = false;
        break;
      case 8:  // a zero-length chunk in the middle: harmless
        if (np >= 2) parts.insert(parts.begin() + 1, {parts[1].first, std::string()});
        break;
      default:
        break;
    }
    for (size_t k = 0; k < parts.size(); ++k) {
      v1::PutBlocksRequest r;
      r.set_namespace_id(ns_id);
      r.set_block_hash(b.hash);
      r.set_offset(parts[k].first);
      r.set_data(parts[k].second);
      // block_bytes and the encoding on the first chunk; later chunks may repeat them.
      if (k == 0 || (cut & 0x40)) {
        r.set_encoding(enc);
        r.set_block_bytes(block_bytes);
      }
      if (k > 0 && m == 5) {  // a later chunk changes block_bytes
        r.set_block_bytes(total + 8);
        chunks_ok = false;
      }
      if (k > 0 && m == 9) {  // a later chunk changes the encoding
        r.set_encoding(enc == v1::ENCODING_RAW ? v1::ENCODING_PACKED : v1::ENCODING_RAW);
        chunks_ok = false;
      }
      b.chunks.push_back(std::move(r));
    }
    if ((m == 5 || m == 9) && parts.size() < 2) chunks_ok = true;  // nothing changed
    b.well_formed = hash_ok && encoding_ok && chunks_ok;
    return b;
  }

  void PutStream(Input& in) {
    const uint8_t head = in.Byte();
    Ns& n = ns_[head % kNamespaces];
    const bool bogus_ns = (head >> 2) % 16 == 0;
    const uint64_t ns_id = bogus_ns ? (uint64_t{in.U32()} << 32 | 0x5a5a) : n.id;
    const int count = 1 + static_cast<int>(in.Below(5));
    std::vector<PutBlock> blocks;
    for (int i = 0; i < count; ++i) blocks.push_back(MakeBlock(in, n, ns_id));
    const bool switch_ns = (head >> 6) == 3 && count > 1;  // a later message names another ns
    const bool stop_early = (head >> 6) == 2;              // WritesDone mid-block
    v1::PutBlocksResponse resp;
    auto ctx = Context();
    auto w = stub_->PutBlocks(ctx.get(), &resp);
    bool wrote_all = true;
    for (size_t i = 0; i < blocks.size(); ++i) {
      for (size_t k = 0; k < blocks[i].chunks.size(); ++k) {
        v1::PutBlocksRequest r = blocks[i].chunks[k];
        if (switch_ns && i == blocks.size() - 1)
          r.set_namespace_id(ns_[(head + 1) % kNamespaces].id);
        if (stop_early && i == blocks.size() - 1 && k == blocks[i].chunks.size() - 1 &&
            blocks[i].chunks.size() > 1) {
          blocks[i].well_formed = false;  // its last chunk is never sent
          break;
        }
        if (!w->Write(r)) {
          wrote_all = false;
          break;
        }
      }
      if (!wrote_all) break;
    }
    w->WritesDone();
    const grpc::Status s = w->Finish();
    ExpectClean(s, "PutBlocks");
    for (const auto& r : resp.results()) {
      // DATA_LOSS is a PACKED block's checksum mismatch (docs/api.md).
      if (!CleanCode(r.code()) && r.code() != static_cast<int>(grpc::StatusCode::DATA_LOSS)) {
        Violation("PutBlocks block result code " + std::to_string(r.code()) + ": " + r.message());
      }
    }
    if (bogus_ns) {
      if (s.ok()) Violation("PutBlocks to an unknown namespace succeeded");
      return;
    }
    if (!s.ok()) {
      ++counts_.failed_streams;
      // Outcome unseen: any well-formed, acceptable block may have been stored.
      for (const PutBlock& b : blocks) {
        if (b.well_formed && b.stored.has_value()) n.blocks[b.hash].possible.push_back(*b.stored);
      }
      return;
    }
    if (switch_ns) Violation("a PutBlocks stream that changed namespace succeeded");
    if (resp.results_size() != static_cast<int>(blocks.size())) {
      std::string what;
      for (const PutBlock& b : blocks) {
        what += "\n  block: hash " + std::to_string(b.hash.size()) + " bytes, " +
                std::to_string(b.chunks.size()) + " chunks, well formed " +
                std::to_string(b.well_formed);
      }
      for (const auto& r : resp.results())
        what += "\n  result " + std::to_string(r.code()) + " " + r.message();
      Violation("PutBlocks gave " + std::to_string(resp.results_size()) + " results for " +
                std::to_string(blocks.size()) + " blocks:" + what);
    }
    for (size_t i = 0; i < blocks.size(); ++i) {
      const PutBlock& b = blocks[i];
      const v1::BlockResult& r = resp.results(static_cast<int>(i));
      if (r.code() != 0) {  // not stored
        ++counts_.refused;
        continue;
      }
      ++counts_.acked;
      if (!b.well_formed)
        Violation("PutBlocks acknowledged a malformed block (" + r.message() + ")");
      if (!b.stored.has_value()) {
        Violation(
            "PutBlocks acknowledged a block the codec refuses (non-finite values or a "
            "damaged packed block)");
      }
      if (r.stored_bytes() != b.stored->size()) Violation("stored_bytes is not the packed size");
      Known& k = n.blocks[b.hash];
      k.acked = *b.stored;
      k.possible.clear();
    }
  }

  // GetBlocks through the stub, reassembled with every chunk checked. got: index -> bytes of
  // the found blocks.
  grpc::Status Fetch(const Ns& n, const std::vector<std::string>& hashes, int encoding, int dtype,
                     uint32_t layer_begin, uint32_t layer_end, std::map<uint32_t, std::string>* got,
                     uint64_t ns_id = 0, int* resp_dtype = nullptr) {
    v1::GetBlocksRequest req;
    req.set_namespace_id(ns_id != 0 ? ns_id : n.id);
    for (const std::string& h : hashes) req.add_block_hashes(h);
    req.set_encoding(static_cast<v1::Encoding>(encoding));
    req.set_dtype(static_cast<v1::DType>(dtype));
    req.set_layer_begin(layer_begin);
    req.set_layer_end(layer_end);
    auto ctx = Context();
    auto r = stub_->GetBlocks(ctx.get(), req);
    v1::GetBlocksResponse resp;
    std::map<uint32_t, uint64_t> total;
    std::set<uint32_t> seen;
    while (r->Read(&resp)) {
      const uint32_t i = resp.index();
      if (i >= hashes.size()) Violation("GetBlocks index out of range");
      if (resp.block_hash() != hashes[i] && !resp.block_hash().empty() && resp.offset() == 0) {
        Violation("GetBlocks answered index " + std::to_string(i) + " with another hash");
      }
      if (!resp.found()) {
        if (!resp.data().empty() || seen.count(i) != 0) Violation("a missing block with data");
        seen.insert(i);
        continue;
      }
      if (resp.offset() == 0) {
        if (seen.count(i) != 0) Violation("GetBlocks sent block " + std::to_string(i) + " twice");
        seen.insert(i);
        total[i] = resp.block_bytes();
        (*got)[i].clear();
        if (resp_dtype != nullptr) *resp_dtype = resp.dtype();
      }
      if (total.count(i) == 0 || resp.offset() != (*got)[i].size() ||
          resp.block_bytes() != total[i] || (*got)[i].size() + resp.data().size() > total[i]) {
        Violation("GetBlocks chunks do not reassemble (block " + std::to_string(i) + ")");
      }
      (*got)[i] += resp.data();
    }
    const grpc::Status s = r->Finish();
    if (s.ok()) {
      for (const auto& [i, bytes] : *got) {
        if (bytes.size() != total[i]) Violation("GetBlocks block cut short");
      }
      if (seen.size() != hashes.size()) Violation("GetBlocks did not answer every hash");
    }
    return s;
  }

  void GetBlocks(Input& in) {
    const uint8_t head = in.Byte();
    Ns& n = ns_[head % kNamespaces];
    const int count = 1 + static_cast<int>(in.Below(8));
    std::vector<std::string> hashes;
    for (int i = 0; i < count; ++i) hashes.push_back(Hash(in));
    const uint8_t shape = in.Byte();
    int encoding = (shape & 1) ? v1::ENCODING_PACKED : v1::ENCODING_RAW;
    if (shape % 16 == 14) encoding = static_cast<int>(in.Below(5));  // 0, 3, 4: invalid
    int dtype = (shape >> 1) % 4;                                    // 0 = namespace dtype
    if (shape % 16 == 15) dtype = 4 + static_cast<int>(in.Below(3));
    uint32_t layer_begin = 0, layer_end = 0;
    if (shape & 0x80) {
      layer_begin = in.Below(4);
      layer_end = in.Below(4);
    }
    const bool bogus_ns = (head >> 2) % 32 == 0;
    std::map<uint32_t, std::string> got;
    int served_dtype = 0;
    const grpc::Status s = Fetch(n, hashes, encoding, dtype, layer_begin, layer_end, &got,
                                 bogus_ns ? (uint64_t{in.U32()} << 32 | 0xa5a5) : 0, &served_dtype);
    ExpectClean(s, "GetBlocks");
    if (bogus_ns && s.ok()) Violation("GetBlocks of an unknown namespace succeeded");
    if (!s.ok()) return;
    // What the request asks of the local decode.
    const bool raw = encoding == v1::ENCODING_RAW;
    if (encoding != v1::ENCODING_RAW && encoding != v1::ENCODING_PACKED) {
      if (!got.empty()) Violation("GetBlocks served blocks in an invalid encoding");
      return;
    }
    codec::DType out = n.dtype;
    if (raw && dtype != 0) {
      if (dtype > 3) {
        if (!got.empty()) Violation("GetBlocks served blocks in an invalid dtype");
        return;
      }
      out = dtype == 1   ? codec::DType::kFloat16
            : dtype == 2 ? codec::DType::kBFloat16
                         : codec::DType::kFloat32;
    }
    const codec::LayerRange range{static_cast<int>(layer_begin),
                                  layer_end == 0 ? -1 : static_cast<int>(layer_end)};
    counts_.misses += hashes.size() - got.size();
    for (const auto& [i, bytes] : got) {
      ++counts_.checked;
      auto k = n.blocks.find(hashes[i]);
      if (k == n.blocks.end()) Violation("GetBlocks served a block never put");
      std::vector<std::string> ok = k->second.possible;
      if (k->second.acked.has_value()) ok.push_back(*k->second.acked);
      bool match = false;
      for (const std::string& p : ok) {
        if (!raw) {
          match = match || bytes == p;
          continue;
        }
        auto size = n.codec->DecodedBytes(out, range);
        if (!size.ok()) Violation("GetBlocks RAW served a layer range the codec refuses");
        std::string want(*size, '\0');
        const absl::Status d = n.codec->Decode(
            absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(p.data()), p.size()), out, range,
            absl::MakeSpan(reinterpret_cast<uint8_t*>(want.data()), want.size()));
        if (!d.ok()) Violation("a stored block does not decode locally: " + d.ToString());
        match = match || bytes == want;
      }
      if (!match) {
        Violation(std::string("GetBlocks ") + (raw ? "RAW" : "PACKED") +
                  " served bytes that are "
                  "not the last acknowledged put of the hash (" +
                  std::to_string(ok.size()) + " candidates)");
      }
      // A read settles which of the unseen puts landed.
      if (!raw) {
        k->second.acked = bytes;
        k->second.possible.clear();
      }
    }
    if (raw && !got.empty() && served_dtype != 0 &&
        served_dtype != (out == codec::DType::kFloat16    ? 1
                         : out == codec::DType::kBFloat16 ? 2
                                                          : 3)) {
      Violation("GetBlocks RAW answered in another dtype");
    }
  }

  void Lookup(Input& in) {
    const uint8_t head = in.Byte();
    Ns& n = ns_[head % kNamespaces];
    v1::LookupRequest req;
    req.set_namespace_id(n.id);
    const int count = static_cast<int>(in.Below(10));
    for (int i = 0; i < count; ++i) req.add_block_hashes(Hash(in));
    req.set_lease_seconds((head >> 2) % 4 == 0 ? in.Below(8) : 0);
    v1::LookupResponse resp;
    const grpc::Status s = stub_->Lookup(Context().get(), req, &resp);
    ExpectClean(s, "Lookup");
    if (s.ok() && resp.matched_blocks() > static_cast<uint32_t>(count)) {
      Violation("Lookup matched more blocks than asked");
    }
    if (s.ok() &&
        resp.matched_tokens() != uint64_t{resp.matched_blocks()} * n.descriptor.block_tokens()) {
      Violation("Lookup's matched_tokens is not matched_blocks * block_tokens");
    }
  }

  void Delete(Input& in) {
    const uint8_t head = in.Byte();
    Ns& n = ns_[head % kNamespaces];
    v1::DeleteBlocksRequest req;
    req.set_namespace_id(n.id);
    std::vector<std::string> hashes;
    const int count = static_cast<int>(in.Below(6));
    for (int i = 0; i < count; ++i) {
      hashes.push_back(Hash(in));
      req.add_block_hashes(hashes.back());
    }
    v1::DeleteBlocksResponse resp;
    const grpc::Status s = stub_->DeleteBlocks(Context().get(), req, &resp);
    ExpectClean(s, "DeleteBlocks");
    if (!s.ok()) return;
    if (resp.deleted_blocks() > static_cast<uint32_t>(count)) Violation("deleted more than asked");
    for (const std::string& h : hashes) {
      auto k = n.blocks.find(h);
      if (k == n.blocks.end()) continue;
      k->second.acked.reset();
      k->second.possible.clear();
    }
  }

  void DropAndRegister(Input& in) {
    const uint8_t head = in.Byte();
    if (head % 4 != 0) {
      // A fuzzed descriptor: registration must validate it cleanly.
      v1::RegisterNamespaceRequest req;
      v1::NamespaceDescriptor* d = req.mutable_namespace_descriptor();
      d->set_model("fuzz/registered-" + std::to_string(in.Below(8)));
      d->set_dtype(static_cast<v1::DType>(in.Below(5)));
      d->set_num_layers(in.Below(5));
      d->set_num_kv_heads(in.Below(4));
      d->set_head_dim(in.Byte() % 2 ? 16u << in.Below(4) : in.Byte());
      d->set_block_tokens(in.Below(3) == 0 ? in.U32() : 1u << in.Below(6));
      static const char* kPresets[] = {"", "raw", "k4v4-g32", "k3v2-g32-qjl", "k8v4", "nope"};
      d->mutable_codec()->set_preset(kPresets[in.Below(6)]);
      if (in.Byte() % 4 == 0) {
        d->mutable_codec()->mutable_key()->set_bits(in.Below(20));
        d->mutable_codec()->mutable_key()->set_group_size(1u << in.Below(10));
        d->mutable_codec()->mutable_key()->set_qjl(in.Byte() % 2);
        d->mutable_codec()->set_protected_last_layers(in.Below(6));
        d->mutable_codec()->set_protected_bits(in.Below(20));
      }
      if (in.Byte() % 8 == 0) d->set_ttl_seconds(in.Below(3));
      v1::RegisterNamespaceResponse resp;
      const grpc::Status s = stub_->RegisterNamespace(Context().get(), req, &resp);
      ExpectClean(s, "RegisterNamespace");
      if (s.ok()) {  // and dropped again (fuzzed namespaces never pile up to the limit)
        v1::DropNamespaceRequest drop;
        drop.set_namespace_id(resp.namespace_id());
        v1::DropNamespaceResponse dr;
        ExpectClean(stub_->DropNamespace(Context().get(), drop, &dr), "DropNamespace");
      }
      return;
    }
    // A base namespace dropped and registered again: every block of it is gone.
    Ns& n = ns_[(head >> 2) % kNamespaces];
    v1::DropNamespaceRequest drop;
    drop.set_namespace_id(n.id);
    v1::DropNamespaceResponse dr;
    const grpc::Status s = stub_->DropNamespace(Context().get(), drop, &dr);
    ExpectClean(s, "DropNamespace");
    if (!s.ok()) Violation("DropNamespace of a base namespace failed: " + s.error_message());
    Register(n);
  }

  void Stats() {
    v1::StatsRequest req;
    v1::StatsResponse resp;
    const grpc::Status s = stub_->Stats(Context().get(), req, &resp);
    ExpectClean(s, "Stats");
    if (s.ok() && resp.used_bytes() > resp.capacity_bytes()) {
      Violation("Stats: used_bytes beyond capacity_bytes");
    }
  }

  Counts counts_;
  std::string dir_;
  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TurboKV::Stub> stub_;
  Ns ns_[kNamespaces];
};

}  // namespace turbokv::server::fuzz

#endif  // TURBOKV_TESTS_FUZZ_SERVICE_FUZZ_TARGET_H_
