// The hot paths of the two wire formats (client/src/wire_format.h, server/service/wire_format.h):
// the server's LookupRequest parse and GetBlocksResponse serialization, the client's
// GetBlocksResponse parse and LookupRequest serialization. Prints figures; asserts nothing.
//   build/bin/wire_format_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "server/service/wire_format.h"
#include "turbokv/v1/turbokv.pb.h"
#include "wire_format.h"

namespace {

std::vector<std::string> Chain(int n) {
  std::vector<std::string> hashes;
  hashes.reserve(n);
  for (int i = 0; i < n; ++i) hashes.emplace_back(32, static_cast<char>(i));
  return hashes;
}

// A LookupRequest of 1,000 32-byte hashes, parsed into views.
void BM_ParseLookupRequest(benchmark::State& state) {
  turbokv::v1::LookupRequest m;
  m.set_namespace_id(0x0123456789abcdefULL);
  for (const std::string& h : Chain(1000)) m.add_block_hashes(h);
  m.set_lease_seconds(60);
  const std::string bytes = m.SerializeAsString();
  turbokv::server::LookupRequestView v;
  for (auto _ : state) {
    benchmark::DoNotOptimize(turbokv::server::ParseLookupRequest(bytes, &v).ok());
    benchmark::DoNotOptimize(v.block_hashes.data());
  }
  state.SetBytesProcessed(state.iterations() * bytes.size());
}
BENCHMARK(BM_ParseLookupRequest);

// The same request written by the client.
void BM_SerializeLookupRequest(benchmark::State& state) {
  const std::vector<std::string> hashes = Chain(1000);
  for (auto _ : state) {
    grpc::ByteBuffer b = turbokv::client::internal::SerializeLookupRequest(1, hashes, 60);
    benchmark::DoNotOptimize(b.Length());
  }
}
BENCHMARK(BM_SerializeLookupRequest);

// One 1 MiB GetBlocksResponse chunk (the payload is not copied).
void BM_SerializeGetBlocksResponse(benchmark::State& state) {
  auto owner = std::make_shared<std::string>(1 << 20, 'p');
  turbokv::v1::GetBlocksResponse fields;
  fields.set_index(5);
  fields.set_block_hash(std::string(32, 'h'));
  fields.set_found(true);
  fields.set_encoding(turbokv::v1::ENCODING_PACKED);
  fields.set_block_bytes(4 << 20);
  fields.set_offset(1 << 20);
  const turbokv::server::Payload payload{owner, owner->data(), owner->size()};
  for (auto _ : state) {
    grpc::ByteBuffer b = turbokv::server::SerializeGetBlocksResponse(fields, payload);
    benchmark::DoNotOptimize(b.Length());
  }
}
BENCHMARK(BM_SerializeGetBlocksResponse);

// The same chunk parsed by the client from pieces of state.range(0) bytes (gRPC on loopback
// hands a 1 MiB message over in 81-89 slices of about 12 KiB).
void BM_ParseGetBlocksResponse(benchmark::State& state) {
  turbokv::v1::GetBlocksResponse m;
  m.set_index(5);
  m.set_block_hash(std::string(32, 'h'));
  m.set_found(true);
  m.set_block_bytes(4 << 20);
  m.set_offset(1 << 20);
  m.set_data(std::string(1 << 20, 'd'));
  const std::string bytes = m.SerializeAsString();
  std::vector<absl::string_view> pieces;
  const auto piece = static_cast<size_t>(state.range(0));
  for (size_t at = 0; at < bytes.size(); at += piece) {
    pieces.push_back(absl::string_view(bytes).substr(at, piece));
  }
  turbokv::client::internal::WireChunk c;
  for (auto _ : state) {
    benchmark::DoNotOptimize(turbokv::client::internal::ParseGetBlocksResponse(pieces, &c).ok());
    benchmark::DoNotOptimize(c.data.data());
  }
}
BENCHMARK(BM_ParseGetBlocksResponse)->Arg(12 << 10)->Arg(64 << 10);

}  // namespace

BENCHMARK_MAIN();
