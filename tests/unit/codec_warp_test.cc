// The CUDA kernels' per-warp code (kernels/src/warp_codec.h, gpu_plan.h) run on a 32-lane
// emulator (warp_emulator.h) with the backend's own launch decomposition, aligned layout and
// host-side assembly: packed bytes must equal the CPU codec's and decoded values must equal the
// CPU decode, for every preset x head_dim x dtype and every (g, bits, qjl) the format has. This
// is the evidence, without a GPU, that the device produces the CPU's bytes: only the CUDA
// runtime calls and the hardware fp16 conversions are outside it (tests/gpu/ covers those).
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codec_test_util.h"
#include "gpu_plan.h"
#include "gtest/gtest.h"
#include "turbokv/codec/block_codec.h"
#include "warp_codec.h"
#include "warp_emulator.h"

namespace turbokv::codec {
namespace {

using internal::CodebookTables;
using internal::DeviceSection;
using internal::GpuPlan;
using internal::GroupLaunch;
using internal::TileShape;
using ::turbokv::testing_util::EmulatedWarp;
using ::turbokv::testing_util::WarpEmulator;

// 16-byte aligned host buffer (the device buffers' alignment).
class Aligned {
 public:
  explicit Aligned(size_t bytes) : words_((bytes + 15) / 16 + 1) { std::memset(data(), 0, bytes); }
  uint8_t* data() { return reinterpret_cast<uint8_t*>(words_.data()); }

 private:
  std::vector<internal::Bytes16> words_;
};

// What the backend keeps per codec, with host addresses where the device would have its own.
struct EmulatedPlan {
  explicit EmulatedPlan(const BlockCodec& c)
      : codec(c), plan(internal::MakeGpuPlan(c)), blob(plan.blob.size()) {
    const std::vector<uint8_t> m =
        internal::MaterializeBlob(plan, codec, reinterpret_cast<uintptr_t>(blob.data()));
    std::memcpy(blob.data(), m.data(), m.size());
  }
  const BlockCodec& codec;
  GpuPlan plan;
  Aligned blob;
  std::vector<std::unique_ptr<Aligned>> codebooks;

  CodebookTables Tables(int g, int bits) {
    const Codebook* cb = *GetCodebook(g, bits);
    CodebookTables t;
    const std::vector<uint8_t> bytes = internal::MakeCodebookBlob(*cb, &t);
    codebooks.push_back(std::make_unique<Aligned>(bytes.size()));
    std::memcpy(codebooks.back()->data(), bytes.data(), bytes.size());
    return internal::RebaseCodebook(t, reinterpret_cast<uintptr_t>(codebooks.back()->data()));
  }
  std::vector<GroupLaunch> Launches(int begin, int end, uint32_t blocks, DType dtype) {
    std::vector<GroupLaunch> ls = internal::MakeLaunches(
        plan, codec, reinterpret_cast<uintptr_t>(blob.data()), begin, end, blocks, dtype);
    for (GroupLaunch& a : ls) a.codebook = Tables(a.group_size, a.bits);
    return ls;
  }
};

// Runs every tile of a launch on the emulator, as the kernels' grid-stride loop does.
struct RunTiles {
  WarpEmulator* emu;
  const GroupLaunch* a;
  bool encode;
  std::string* divergence;

  template <int kG, int kBits, bool kQjl>
  void operator()() const {
    using S = TileShape<kG>;
    std::vector<float> scratch(internal::QjlScratchFloats<kG>());
    for (uint64_t id = 0; id < internal::LaunchTiles(*a); ++id) {
      const internal::TileCoord t = internal::TileOf(id, a->num_sections, a->tiles_per_section);
      const DeviceSection& s = a->sections[t.section];
      const internal::TileIo io = internal::TileIoFor(*a, s, t, S::kGroupsPerTile);
      const std::string err = emu->Run([&](const EmulatedWarp& w) {
        if (encode) {
          internal::EncodeTile<kG, kBits, kQjl>(w, a->codebook, s.args, io, scratch.data());
        } else {
          internal::DecodeTile<kG, kBits, kQjl>(w, a->codebook, s.args, io);
        }
      });
      if (!err.empty() && divergence->empty()) *divergence = err;
    }
  }
};

void Run(WarpEmulator& emu, const GpuPlan& plan, const GroupLaunch& a, bool encode) {
  std::string divergence;
  (void)plan;
  ASSERT_TRUE(internal::DispatchGroupCodec(a.group_size, a.bits, a.qjl,
                                           RunTiles{&emu, &a, encode, &divergence}));
  ASSERT_EQ(divergence, "");
}

// Encodes `raws` as the CUDA backend does (one launch per (g, bits, qjl) over all blocks).
// flagged[i]: the kernels reported bad input in block i.
std::vector<std::vector<uint8_t>> EmulateEncode(WarpEmulator& emu, const BlockCodec& codec,
                                                const std::vector<std::vector<uint8_t>>& raws,
                                                std::vector<uint32_t>* flagged) {
  EmulatedPlan ep(codec);
  const size_t n = raws.size();
  Aligned raw(n * codec.raw_bytes());
  for (size_t i = 0; i < n; ++i)
    std::memcpy(raw.data() + i * codec.raw_bytes(), raws[i].data(), codec.raw_bytes());
  Aligned aligned(n * ep.plan.aligned_block_bytes);
  flagged->assign(n, 0);
  for (GroupLaunch& a :
       ep.Launches(0, codec.shape().num_layers, static_cast<uint32_t>(n), codec.shape().dtype)) {
    EXPECT_EQ(a.values_block_stride, codec.raw_bytes());
    a.values = raw.data();
    a.aligned = aligned.data();
    a.errors = flagged->data();
    Run(emu, ep.plan, a, /*encode=*/true);
  }
  std::vector<std::vector<uint8_t>> packed(n, std::vector<uint8_t>(codec.packed_bytes()));
  for (size_t i = 0; i < n; ++i) {
    if ((*flagged)[i] != 0) continue;
    internal::AlignedToPacked(ep.plan, aligned.data() + i * ep.plan.aligned_block_bytes,
                              packed[i].data());
    const absl::Status s = internal::FinishPackedBlock(codec, raws[i], absl::MakeSpan(packed[i]));
    EXPECT_TRUE(s.ok()) << s;
  }
  return packed;
}

std::vector<std::vector<uint8_t>> EmulateDecode(WarpEmulator& emu, const BlockCodec& codec,
                                                const std::vector<std::vector<uint8_t>>& packed,
                                                DType out_dtype, LayerRange range) {
  EmulatedPlan ep(codec);
  const int end = range.end < 0 ? codec.shape().num_layers : range.end;
  const size_t n = packed.size();
  const size_t out_bytes = *codec.DecodedBytes(out_dtype, range);
  Aligned aligned(n * ep.plan.aligned_block_bytes);
  for (size_t i = 0; i < n; ++i) {
    internal::PackedToAligned(ep.plan, packed[i].data(), range.begin, end,
                              aligned.data() + i * ep.plan.aligned_block_bytes);
  }
  Aligned out(n * out_bytes);
  for (GroupLaunch& a : ep.Launches(range.begin, end, static_cast<uint32_t>(n), out_dtype)) {
    EXPECT_EQ(a.values_block_stride, out_bytes);
    a.values = out.data();
    a.aligned = aligned.data();
    Run(emu, ep.plan, a, /*encode=*/false);
  }
  // Unquantized sections: the plain decode kernel's work items.
  internal::PlainLaunch pl =
      internal::MakePlainLaunch(ep.plan, codec, reinterpret_cast<uintptr_t>(ep.blob.data()),
                                range.begin, end, static_cast<uint32_t>(n), out_dtype);
  pl.aligned = aligned.data();
  pl.values = out.data();
  EXPECT_EQ(pl.values_block_stride, out_bytes);
  for (uint64_t i = 0; i < internal::PlainItems(pl); ++i) internal::DecodePlainItem(pl, i);
  std::vector<std::vector<uint8_t>> result(n);
  for (size_t i = 0; i < n; ++i)
    result[i].assign(out.data() + i * out_bytes, out.data() + (i + 1) * out_bytes);
  return result;
}

// "" when equal, else the first differing byte.
std::string Diff(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      return "byte " + std::to_string(i) + " of " + std::to_string(got.size()) + ": " +
             std::to_string(got[i]) + " != " + std::to_string(want[i]);
    }
  }
  return "";
}

// Encode and decode through the emulated kernels; compare with the CPU byte for byte.
void ExpectMatchesCpu(const BlockShape& shape, const CodecSpec& spec, int blocks) {
  absl::StatusOr<BlockCodec> codec = BlockCodec::Create(shape, spec, 42);
  ASSERT_TRUE(codec.ok()) << codec.status();
  std::vector<std::vector<uint8_t>> raws, cpu(blocks);
  for (int i = 0; i < blocks; ++i) {
    raws.push_back(testing_util::RandomBlock(shape, 1000 + i));
    cpu[i].resize(codec->packed_bytes());
  }
  // Zero groups, a tiny group (subnormal fp16 squares) and a group with one large value.
  const size_t zeros = std::min<size_t>(64, shape.num_values());
  for (size_t j = 0; j < zeros; ++j) testing_util::StoreAs(shape.dtype, raws[0], j, 0.0f);
  if (shape.num_values() > 2 * zeros) {
    for (size_t j = zeros; j < 2 * zeros; ++j)
      testing_util::StoreAs(shape.dtype, raws[0], j, 1e-3f);
    testing_util::StoreAs(shape.dtype, raws[0], 2 * zeros + 3, 3000.0f);
  }
  for (int i = 0; i < blocks; ++i) {
    ASSERT_TRUE(codec->Encode(raws[i], absl::MakeSpan(cpu[i]), CpuIsa::kScalar).ok());
  }
  WarpEmulator emu;
  std::vector<uint32_t> flagged;
  const std::vector<std::vector<uint8_t>> gpu = EmulateEncode(emu, *codec, raws, &flagged);
  for (int i = 0; i < blocks; ++i) {
    ASSERT_EQ(flagged[i], 0u) << "block " << i;
    ASSERT_EQ(Diff(gpu[i], cpu[i]), "") << "block " << i;
  }
  for (DType out_dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
    std::vector<LayerRange> ranges{LayerRange{0, -1}};
    if (shape.num_layers > 2) ranges.push_back(LayerRange{1, shape.num_layers});
    for (LayerRange range : ranges) {
      const std::vector<std::vector<uint8_t>> dec =
          EmulateDecode(emu, *codec, cpu, out_dtype, range);
      for (int i = 0; i < blocks; ++i) {
        std::vector<uint8_t> want(*codec->DecodedBytes(out_dtype, range));
        ASSERT_TRUE(
            codec->Decode(cpu[i], out_dtype, range, absl::MakeSpan(want), CpuIsa::kScalar).ok());
        ASSERT_EQ(Diff(dec[i], want), "") << "block " << i << " out " << DTypeName(out_dtype)
                                          << " layers " << range.begin << ".." << range.end;
      }
    }
  }
}

class WarpKernelMatchesCpu : public testing::TestWithParam<std::tuple<std::string, int, DType>> {};

// Every preset x head_dim x dtype of the GPU acceptance check (tests/gpu/), with an 8-bit
// protected layer, partial last tiles (5 tokens x 3 heads) and two blocks per launch.
TEST_P(WarpKernelMatchesCpu, PackedBytesAndDecodedValues) {
  const auto& [preset, head_dim, dtype] = GetParam();
  absl::StatusOr<CodecSpec> spec = PresetSpec(preset, head_dim);
  ASSERT_TRUE(spec.ok());
  spec->protected_last_layers = 1;
  ExpectMatchesCpu(BlockShape{3, 5, 3, head_dim, dtype}, *spec, 2);
}

INSTANTIATE_TEST_SUITE_P(
    Presets, WarpKernelMatchesCpu,
    testing::Combine(testing::Values("k8v6", "k8v4", "k6v6", "k6v5", "k6v4", "k5v4", "k4v4-g32",
                                     "k4v3-g32", "k3v3-g32", "k3v2-g32-qjl", "k3v2", "raw"),
                     testing::Values(64, 96, 128, 256),
                     testing::Values(DType::kFloat16, DType::kBFloat16, DType::kFloat32)),
    [](const auto& info) {
      std::string name = std::get<0>(info.param) + "_d" + std::to_string(std::get<1>(info.param)) +
                         "_" + std::string(DTypeName(std::get<2>(info.param)));
      for (char& c : name) {
        if (c == '-') c = '_';
      }
      return name;
    });

class WarpKernelConfigs : public testing::TestWithParam<std::tuple<int, int, bool>> {};

// Every (g, bits, qjl) template instance, K and V alike, fp16 protected layers too.
TEST_P(WarpKernelConfigs, PackedBytesAndDecodedValues) {
  const auto& [g, bits, qjl] = GetParam();
  const CodecSpec spec = testing_util::KernelInstanceSpec(g, bits, qjl);
  ExpectMatchesCpu(BlockShape{2, 3, 2, 256, DType::kFloat16}, spec, 1);
}

INSTANTIATE_TEST_SUITE_P(AllInstances, WarpKernelConfigs,
                         testing::Combine(testing::Values(8, 16, 32, 64, 128, 256),
                                          testing::Values(1, 2, 3, 4, 5, 6, 8), testing::Bool()));

TEST(WarpKernelTest, OddShapesMatchCpu) {
  // head_dim 8 (g = 8), 80 (g = 16), one token; norm correction off.
  for (int head_dim : {8, 80, 192}) {
    for (const char* preset : {"k4v4-g32", "k8v4", "k3v2-g32-qjl"}) {
      absl::StatusOr<CodecSpec> spec = PresetSpec(preset, head_dim);
      ASSERT_TRUE(spec.ok());
      SCOPED_TRACE(std::string(preset) + " head_dim " + std::to_string(head_dim));
      ExpectMatchesCpu(BlockShape{1, 1, 1, head_dim, DType::kFloat16}, *spec, 1);
      spec->norm_correction = false;
      ExpectMatchesCpu(BlockShape{2, 3, 2, head_dim, DType::kBFloat16}, *spec, 1);
    }
  }
}

TEST(WarpKernelTest, FlagsTheBlocksWithBadInputOnly) {
  const BlockShape shape{2, 4, 2, 128, DType::kFloat32};
  absl::StatusOr<BlockCodec> codec = BlockCodec::Create(shape, *PresetSpec("k8v4", 128));
  ASSERT_TRUE(codec.ok());
  std::vector<std::vector<uint8_t>> raws;
  for (int i = 0; i < 4; ++i) raws.push_back(testing_util::RandomBlock(shape, 7 + i));
  testing_util::StoreAs(DType::kFloat32, raws[1], 700, std::numeric_limits<float>::quiet_NaN());
  testing_util::StoreAs(DType::kFloat32, raws[2], 5, std::numeric_limits<float>::infinity());
  // A group whose norm (and so its fp16 scale) is beyond fp16: the kernels flag it and the
  // host encodes the block on the CPU, which writes a wide scale (cuda_codec.cc, RunEncode).
  for (int j = 0; j < 32; ++j)
    testing_util::StoreAs(DType::kFloat32, raws[3], 4 * 128 * 2 + 256 + j, 6e4f);
  WarpEmulator emu;
  std::vector<uint32_t> flagged;
  const std::vector<std::vector<uint8_t>> gpu = EmulateEncode(emu, *codec, raws, &flagged);
  EXPECT_EQ(flagged, (std::vector<uint32_t>{0, 1, 1, 1}));
  std::vector<uint8_t> cpu(codec->packed_bytes());
  ASSERT_TRUE(codec->Encode(raws[0], absl::MakeSpan(cpu), CpuIsa::kScalar).ok());
  EXPECT_EQ(Diff(gpu[0], cpu), "");
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(codec->Encode(raws[i], absl::MakeSpan(cpu)).code(),
              absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(codec->Encode(raws[3], absl::MakeSpan(cpu)).ok());
}

// Blocks with wide scales (group norms beyond fp16, FORMAT.md "Wide scales"), written by the
// CPU as the host does for a flagged block, decode on the emulated kernels to the CPU's values
// bit for bit, clamped outputs included, for every output dtype.
TEST(WarpKernelTest, WideScalesDecodeLikeTheCpu) {
  for (DType dtype : {DType::kFloat32, DType::kBFloat16, DType::kFloat16}) {
    for (const char* preset : {"k4v4-g32", "k8v4", "k3v2-g32-qjl"}) {
      for (int head_dim : {64, 256}) {
        SCOPED_TRACE(std::string(preset) + " " + std::string(DTypeName(dtype)) + " head_dim " +
                     std::to_string(head_dim));
        const BlockShape shape{2, 3, 2, head_dim, dtype};
        absl::StatusOr<CodecSpec> spec = PresetSpec(preset, head_dim);
        ASSERT_TRUE(spec.ok());
        spec->protected_last_layers = 1;  // an 8-bit g = head_dim section too
        absl::StatusOr<BlockCodec> codec = BlockCodec::Create(shape, *spec, 3);
        ASSERT_TRUE(codec.ok());
        std::vector<std::vector<uint8_t>> raws{testing_util::RandomBlock(shape, 21),
                                               testing_util::RandomBlock(shape, 22)};
        const float huge = dtype == DType::kFloat32    ? 3.0e38f
                           : dtype == DType::kBFloat16 ? 0x1.fep127f
                                                       : 6e4f;
        const size_t vps = shape.vectors_per_section() * head_dim;
        for (size_t j = 0; j < static_cast<size_t>(head_dim); ++j) {
          testing_util::StoreAs(dtype, raws[0], j, 12000.0f);  // layer 0 K
          testing_util::StoreAs(dtype, raws[0], vps + 2 * head_dim + j,
                                j % 2 ? huge : -huge);  // layer 0 V
          testing_util::StoreAs(dtype, raws[0], 3 * vps + j,
                                j % 3 ? 0.5f * huge : -huge);  // layer 1 V (8-bit)
        }
        std::vector<std::vector<uint8_t>> cpu(2, std::vector<uint8_t>(codec->packed_bytes()));
        for (int i = 0; i < 2; ++i) {
          ASSERT_TRUE(codec->Encode(raws[i], absl::MakeSpan(cpu[i]), CpuIsa::kScalar).ok());
        }
        uint16_t first_scale;
        std::memcpy(&first_scale, cpu[0].data() + codec->plans()[0].offset, 2);
        // (With QJL on K, ‖ŷ'‖ > 1 can bring the 12,000s back under 65,504; V's are wide.)
        if (!codec->layers()[0].key.qjl) {
          ASSERT_TRUE(first_scale & 0x8000) << "the 12,000s group is wide";
        }
        uint16_t v_scale;
        const size_t v_group =
            2 * static_cast<size_t>(head_dim) / codec->layers()[0].value.group_size;
        std::memcpy(&v_scale, cpu[0].data() + codec->plans()[1].offset + 2 * v_group, 2);
        ASSERT_TRUE(v_scale & 0x8000) << "the near-maximum V group is wide";
        WarpEmulator emu;
        std::vector<uint32_t> flagged;
        const std::vector<std::vector<uint8_t>> gpu = EmulateEncode(emu, *codec, raws, &flagged);
        EXPECT_EQ(flagged, (std::vector<uint32_t>{1, 0}));
        EXPECT_EQ(Diff(gpu[1], cpu[1]), "");
        for (DType out_dtype : {DType::kFloat32, DType::kFloat16, DType::kBFloat16}) {
          const std::vector<std::vector<uint8_t>> dec =
              EmulateDecode(emu, *codec, cpu, out_dtype, {0, -1});
          for (int i = 0; i < 2; ++i) {
            std::vector<uint8_t> want(*codec->DecodedBytes(out_dtype, {0, -1}));
            ASSERT_TRUE(
                codec->Decode(cpu[i], out_dtype, {0, -1}, absl::MakeSpan(want), CpuIsa::kScalar)
                    .ok());
            ASSERT_EQ(Diff(dec[i], want), "") << "block " << i << " out " << DTypeName(out_dtype);
          }
        }
      }
    }
  }
}

// The lane-distributed butterflies and serial sums, float for float (no fp16 rounding in
// between to hide a wrong order), for every group size.
struct CheckGroupSteps {
  template <int kG, int kBits, bool kQjl>
  void operator()() const {
    using S = TileShape<kG>;
    std::mt19937 rng(kG);
    std::normal_distribution<float> normal;
    std::vector<float> x(internal::kWarpLanes / S::kLanesPerGroup * kG);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = normal(rng) * std::exp2(static_cast<float>(i % 9) - 4);
    std::vector<float> got_fwht(x.size()), got_sum(x.size() / kG * S::kLanesPerGroup);
    WarpEmulator emu;
    ASSERT_EQ(emu.Run([&](const EmulatedWarp& w) {
      const int lane = w.lane(), p = lane % S::kLanesPerGroup, q = lane / S::kLanesPerGroup;
      float v[S::kValuesPerLane];
      for (int r = 0; r < S::kValuesPerLane; ++r) v[r] = x[q * kG + S::Coord(p, r)];
      const float sum = internal::ChainSum<kG>(w, p, lane - p, [&](int r) { return v[r] * v[r]; });
      got_sum[lane] = sum;
      internal::Fwht<kG>(w, v, p);
      for (int r = 0; r < S::kValuesPerLane; ++r) got_fwht[q * kG + S::Coord(p, r)] = v[r];
    }),
              "");
    for (size_t q = 0; q < x.size() / kG; ++q) {
      std::vector<float> want(x.begin() + q * kG, x.begin() + (q + 1) * kG);
      const float want_sum = internal::SumSquares(want.data(), kG);
      internal::FwhtInPlace(want.data(), kG);
      for (int p = 0; p < S::kLanesPerGroup; ++p) {
        EXPECT_EQ(internal::FloatBits(got_sum[q * S::kLanesPerGroup + p]),
                  internal::FloatBits(want_sum))
            << "g " << kG << " group " << q << " lane position " << p;
      }
      for (int j = 0; j < kG; ++j) {
        ASSERT_EQ(internal::FloatBits(got_fwht[q * kG + j]), internal::FloatBits(want[j]))
            << "g " << kG << " group " << q << " coordinate " << j;
      }
    }
  }
};

TEST(WarpKernelTest, ButterfliesAndSumsEqualGroupMathBitForBit) {
  for (int g : {8, 16, 32, 64, 128, 256}) {
    EXPECT_TRUE(internal::DispatchGroupCodec(g, 4, false, CheckGroupSteps{}));
  }
}

TEST(WarpEmulatorTest, ShufflesFollowCudaSemantics) {
  WarpEmulator emu;
  float got_xor[32], got_bcast[32];
  ASSERT_EQ(emu.Run([&](const EmulatedWarp& w) {
    const float mine = static_cast<float>(w.lane() * 10);
    got_xor[w.lane()] = w.ShflXor(mine, 5);
    got_bcast[w.lane()] = w.Shfl(mine, 7);
  }),
            "");
  for (int l = 0; l < 32; ++l) {
    EXPECT_EQ(got_xor[l], static_cast<float>((l ^ 5) * 10));
    EXPECT_EQ(got_bcast[l], 70.0f);
  }
  EXPECT_EQ(emu.collectives(), 2u);
}

TEST(WarpEmulatorTest, ReportsDivergentCollectives) {
  WarpEmulator emu;
  EXPECT_NE(emu.Run([](const EmulatedWarp& w) {
    if (w.lane() < 16) (void)w.ShflXor(1.0f, 1);
  }),
            "");
  EXPECT_NE(emu.Run([](const EmulatedWarp& w) {
    if (w.lane() == 3) {
      w.Sync();
    } else {
      (void)w.Shfl(1.0f, 0);
    }
  }),
            "");
}

}  // namespace
}  // namespace turbokv::codec
