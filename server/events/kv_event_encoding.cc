#include "server/events/kv_event_encoding.h"

#include <msgpack.h>

namespace turbokv::server {
namespace {

// msgpack-c's packer writes through a callback; this one appends to a std::string.
int AppendToString(void* data, const char* buf, size_t len) {
  static_cast<std::string*>(data)->append(buf, len);
  return 0;
}

class Packer {
 public:
  explicit Packer(std::string* out) { msgpack_packer_init(&pk_, out, AppendToString); }
  void Array(size_t n) { msgpack_pack_array(&pk_, n); }
  void Map(size_t n) { msgpack_pack_map(&pk_, n); }
  void Str(std::string_view s) {
    msgpack_pack_str(&pk_, s.size());
    msgpack_pack_str_body(&pk_, s.data(), s.size());
  }
  void Bin(std::string_view b) {
    msgpack_pack_bin(&pk_, b.size());
    msgpack_pack_bin_body(&pk_, b.data(), b.size());
  }
  void Nil() { msgpack_pack_nil(&pk_); }
  void Double(double d) { msgpack_pack_double(&pk_, d); }
  void Uint(uint32_t v) { msgpack_pack_uint32(&pk_, v); }

 private:
  msgpack_packer pk_;
};

}  // namespace

std::string EncodeKvEventBatch(double ts, absl::Span<const KvEvent> events,
                               std::string_view medium) {
  std::string out;
  size_t reserve = 16;
  for (const KvEvent& e : events) reserve += 96 + e.hashes.size() * 34;
  out.reserve(reserve);
  Packer p(&out);
  p.Array(3);  // KVEventBatch, array-like: ts, events, data_parallel_rank (None)
  p.Double(ts);
  p.Array(events.size());
  for (const KvEvent& e : events) {
    switch (e.type) {
      case KvEvent::Type::kBlockStored:
        p.Map(8);
        p.Str("type");
        p.Str("BlockStored");
        p.Str("block_hashes");
        p.Array(e.hashes.size());
        for (const std::string& h : e.hashes) p.Bin(h);
        p.Str("parent_block_hash");
        p.Nil();
        p.Str("token_ids");
        p.Array(0);
        p.Str("block_size");
        p.Uint(e.block_size);
        p.Str("lora_id");
        p.Nil();
        p.Str("medium");
        p.Str(medium);
        p.Str("lora_name");
        p.Nil();
        break;
      case KvEvent::Type::kBlockRemoved:
        p.Map(3);
        p.Str("type");
        p.Str("BlockRemoved");
        p.Str("block_hashes");
        p.Array(e.hashes.size());
        for (const std::string& h : e.hashes) p.Bin(h);
        p.Str("medium");
        p.Str(medium);
        break;
      case KvEvent::Type::kAllBlocksCleared:
        p.Map(1);
        p.Str("type");
        p.Str("AllBlocksCleared");
        break;
    }
  }
  p.Nil();  // data_parallel_rank
  return out;
}

}  // namespace turbokv::server
