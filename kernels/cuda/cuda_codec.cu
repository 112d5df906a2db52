// CUDA backend (cuda_codec.h). cudaError_t stays inside this file: every CUDA failure becomes
// absl::InternalError here.
#include <cuda_runtime.h>

#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "format.h"
#include "group_math.h"
#include "section_codec.h"
#include "turbokv/codec/codebook.h"
#include "turbokv/codec/cuda_codec.h"
#include "turbokv/codec/status_macros.h"

namespace turbokv::codec {
namespace {

using internal::GroupParams;
using internal::kMaxGroupSize;
using internal::SectionLayout;

// One quantized section of one layer, as the kernels see it (device pointers inside params).
struct DeviceSection {
  GroupParams params;
  int head_dim = 0;
  int groups_per_vector = 0;
  size_t groups = 0;       // groups per section (per block)
  size_t index_bytes = 0;  // per group
  SectionLayout lay;
  size_t raw_offset = 0;     // byte offset of the section in a raw / decoded block
  size_t packed_offset = 0;  // byte offset of the section in a packed block
};

__device__ __forceinline__ uint16_t LoadU16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
__device__ __forceinline__ void StoreU16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v & 0xFF);
  p[1] = static_cast<uint8_t>(v >> 8);
}

__device__ __forceinline__ float LoadValue(const uint8_t* base, DType dtype, size_t i) {
  if (dtype == DType::kFloat32) {
    uint32_t u = 0;
    for (int k = 0; k < 4; ++k) u |= static_cast<uint32_t>(base[4 * i + k]) << (8 * k);
    return BitsFloat(u);
  }
  const uint16_t h = LoadU16(base + 2 * i);
  return dtype == DType::kFloat16 ? HalfToFloat(h) : BFloat16ToFloat(h);
}

__device__ __forceinline__ void StoreValue(uint8_t* base, DType dtype, size_t i, float v) {
  if (dtype == DType::kFloat32) {
    const uint32_t u = FloatBits(v);
    for (int k = 0; k < 4; ++k) base[4 * i + k] = static_cast<uint8_t>(u >> (8 * k));
    return;
  }
  StoreU16(base + 2 * i, dtype == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v));
}

// One thread per group: group_math.h's EncodeGroup. `error` receives the smallest failing
// global group index (the host then re-encodes on the CPU to report the exact position).
__global__ void EncodeGroupsKernel(DeviceSection s, const uint8_t* raw, size_t raw_stride,
                                   DType dtype, uint8_t* packed, size_t packed_stride,
                                   int num_blocks, unsigned long long* error) {
  const size_t gid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (gid >= s.groups * num_blocks) return;
  const size_t b = gid / s.groups;
  const size_t gi = gid % s.groups;
  const int g = s.params.g;
  const uint8_t* src = raw + b * raw_stride + s.raw_offset;  // [groups][g] of dtype
  uint8_t* dst = packed + b * packed_stride + s.packed_offset;
  float x[kMaxGroupSize];
  for (int j = 0; j < g; ++j) {
    x[j] = LoadValue(src, dtype, gi * g + j);
    if (!internal::IsFiniteFloat(x[j])) {
      atomicMin(error, static_cast<unsigned long long>(gid));
      return;
    }
  }
  internal::EncodedGroup enc;
  if (!internal::EncodeGroup(s.params, x, static_cast<int>(gi % s.groups_per_vector) * g, &enc)) {
    atomicMin(error, static_cast<unsigned long long>(gid));
    return;
  }
  StoreU16(dst + s.lay.scales + 2 * gi, enc.scale);
  internal::PackIndices(enc.idx, g, s.params.bits, dst + s.lay.indices + gi * s.index_bytes);
  if (s.params.qjl != nullptr) {
    StoreU16(dst + s.lay.residuals + 2 * gi, enc.residual);
    for (int k = 0; k < g / 8; ++k) dst[s.lay.qjl_bits + gi * (g / 8) + k] = enc.qjl_bits[k];
  }
}

// One thread per group: group_math.h's DecodeGroup, written in out_dtype.
__global__ void DecodeGroupsKernel(DeviceSection s, const uint8_t* packed, size_t packed_stride,
                                   uint8_t* out, size_t out_stride, size_t out_offset,
                                   DType out_dtype, int num_blocks) {
  const size_t gid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (gid >= s.groups * num_blocks) return;
  const size_t b = gid / s.groups;
  const size_t gi = gid % s.groups;
  const int g = s.params.g;
  const uint8_t* src = packed + b * packed_stride + s.packed_offset;
  uint8_t* dst = out + b * out_stride + out_offset;
  uint8_t idx[kMaxGroupSize];
  internal::UnpackIndices(src + s.lay.indices + gi * s.index_bytes, g, s.params.bits, idx);
  uint8_t qbits[kMaxGroupSize / 8] = {};
  uint16_t residual = 0;
  if (s.params.qjl != nullptr) {
    for (int k = 0; k < g / 8; ++k) qbits[k] = src[s.lay.qjl_bits + gi * (g / 8) + k];
    residual = LoadU16(src + s.lay.residuals + 2 * gi);
  }
  float x[kMaxGroupSize];
  internal::DecodeGroup(s.params, idx, qbits, LoadU16(src + s.lay.scales + 2 * gi), residual,
                        static_cast<int>(gi % s.groups_per_vector) * g, x);
  for (int j = 0; j < g; ++j) StoreValue(dst, out_dtype, gi * g + j, x[j]);
}

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(absl::StrCat("CUDA ", what, ": ", cudaGetErrorString(e)));
}

#define TURBOKV_CUDA_RETURN_IF_ERROR(expr, what)        \
  do {                                                  \
    cudaError_t turbokv_cuda_err_ = (expr);             \
    if (turbokv_cuda_err_ != cudaSuccess) return CudaError(turbokv_cuda_err_, what); \
  } while (0)

// A grow-only device buffer.
struct DeviceBuffer {
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* ptr = nullptr;
  size_t capacity = 0;
  absl::Status Reserve(size_t bytes) {
    if (bytes <= capacity) return absl::OkStatus();
    if (ptr != nullptr) cudaFree(ptr);
    ptr = nullptr;
    capacity = 0;
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, bytes), "cudaMalloc");
    capacity = bytes;
    return absl::OkStatus();
  }
  uint8_t* data() const { return static_cast<uint8_t*>(ptr); }
  ~DeviceBuffer() {
    if (ptr != nullptr) cudaFree(ptr);
  }
};

class CudaCodecImpl final : public CudaCodec {
 public:
  CudaCodecImpl(int device, std::string name) : device_(device), name_(std::move(name)) {}
  ~CudaCodecImpl() override {
    for (auto& [key, ptr] : codebooks_) cudaFree(ptr);
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  absl::Status Init() {
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaStreamCreate(&stream_), "cudaStreamCreate");
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start_), "cudaEventCreate");
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop_), "cudaEventCreate");
    return absl::OkStatus();
  }

  std::string DeviceName() const override { return name_; }
  double last_kernel_seconds() const override { return last_kernel_seconds_; }

  absl::Status EncodeBatch(const BlockCodec& codec, absl::Span<const absl::Span<const uint8_t>> raws,
                           absl::Span<const absl::Span<uint8_t>> packeds) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (raws.size() != packeds.size()) {
      return absl::InvalidArgumentError(absl::StrCat("EncodeBatch got ", raws.size(),
                                                     " raw blocks but ", packeds.size(), " outputs"));
    }
    const size_t n = raws.size();
    if (n == 0) return absl::OkStatus();
    const size_t raw_bytes = codec.raw_bytes(), packed_bytes = codec.packed_bytes();
    for (size_t i = 0; i < n; ++i) {
      if (raws[i].size() != raw_bytes || packeds[i].size() != packed_bytes) {
        return codec.Encode(raws[i], packeds[i], CpuIsa::kScalar);  // names the size problem
      }
    }
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
    TURBOKV_RETURN_IF_ERROR(raw_.Reserve(n * raw_bytes));
    TURBOKV_RETURN_IF_ERROR(packed_.Reserve(n * packed_bytes));
    TURBOKV_RETURN_IF_ERROR(error_.Reserve(sizeof(unsigned long long)));
    for (size_t i = 0; i < n; ++i) {
      TURBOKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(raw_.data() + i * raw_bytes, raws[i].data(), raw_bytes,
                                                   cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    }
    const unsigned long long no_error = ~0ULL;
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(error_.ptr, &no_error, sizeof(no_error),
                                                 cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync");
    TURBOKV_ASSIGN_OR_RETURN(std::vector<DeviceSection> sections, Sections(codec, 0, codec.shape().num_layers, /*for_decode=*/false, DType::kFloat32));
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, stream_), "cudaEventRecord");
    for (const DeviceSection& s : sections) {
      const size_t threads = s.groups * n;
      const int block = 128;
      EncodeGroupsKernel<<<static_cast<unsigned>((threads + block - 1) / block), block, 0, stream_>>>(
          s, raw_.data(), raw_bytes, codec.shape().dtype, packed_.data(), packed_bytes,
          static_cast<int>(n), static_cast<unsigned long long*>(error_.ptr));
    }
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "EncodeGroupsKernel launch");
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    unsigned long long error = 0;
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(&error, error_.ptr, sizeof(error), cudaMemcpyDeviceToHost, stream_),
                                 "cudaMemcpyAsync");
    for (size_t i = 0; i < n; ++i) {
      TURBOKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(packeds[i].data(), packed_.data() + i * packed_bytes,
                                                   packed_bytes, cudaMemcpyDeviceToHost, stream_),
                                   "cudaMemcpyAsync");
    }
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, start_, stop_);
    last_kernel_seconds_ = ms / 1e3;
    if (error != no_error) {
      // Re-encode on the CPU: it reports the block, layer, token, head and coordinate.
      for (size_t i = 0; i < n; ++i) {
        absl::Status s = codec.Encode(raws[i], packeds[i], CpuIsa::kScalar);
        if (!s.ok()) return absl::Status(s.code(), absl::StrCat("block ", i, ": ", s.message()));
      }
      return absl::InternalError("the GPU flagged a group that the CPU encodes without error");
    }
    // Header, unquantized sections and checksum on the host.
    for (size_t i = 0; i < n; ++i) {
      TURBOKV_RETURN_IF_ERROR(FinishOnHost(codec, raws[i], packeds[i]));
    }
    return absl::OkStatus();
  }

  absl::Status DecodeBatch(const BlockCodec& codec, absl::Span<const absl::Span<const uint8_t>> packeds,
                           DType out_dtype, LayerRange range,
                           absl::Span<const absl::Span<uint8_t>> outs) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (packeds.size() != outs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("DecodeBatch got ", packeds.size(),
                                                     " packed blocks but ", outs.size(), " outputs"));
    }
    const size_t n = packeds.size();
    if (n == 0) return absl::OkStatus();
    TURBOKV_ASSIGN_OR_RETURN(size_t out_bytes, codec.DecodedBytes(out_dtype, range));
    const int end = range.end < 0 ? codec.shape().num_layers : range.end;
    const size_t packed_bytes = codec.packed_bytes();
    for (size_t i = 0; i < n; ++i) {
      const absl::Span<const uint8_t> h = codec.header();
      if (packeds[i].size() != packed_bytes || outs[i].size() != out_bytes ||
          std::memcmp(packeds[i].data(), h.data(), h.size()) != 0) {
        return codec.Decode(packeds[i], out_dtype, range, outs[i], CpuIsa::kScalar);  // names it
      }
    }
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_), "cudaSetDevice");
    TURBOKV_RETURN_IF_ERROR(packed_.Reserve(n * packed_bytes));
    TURBOKV_RETURN_IF_ERROR(raw_.Reserve(n * out_bytes));
    for (size_t i = 0; i < n; ++i) {
      TURBOKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(packed_.data() + i * packed_bytes, packeds[i].data(),
                                                   packed_bytes, cudaMemcpyHostToDevice, stream_),
                                   "cudaMemcpyAsync");
    }
    TURBOKV_ASSIGN_OR_RETURN(std::vector<DeviceSection> sections, Sections(codec, range.begin, end, /*for_decode=*/true, out_dtype));
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, stream_), "cudaEventRecord");
    for (const DeviceSection& s : sections) {
      const size_t threads = s.groups * n;
      const int block = 128;
      DecodeGroupsKernel<<<static_cast<unsigned>((threads + block - 1) / block), block, 0, stream_>>>(
          s, packed_.data(), packed_bytes, raw_.data(), out_bytes, s.raw_offset, out_dtype,
          static_cast<int>(n));
    }
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaGetLastError(), "DecodeGroupsKernel launch");
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    for (size_t i = 0; i < n; ++i) {
      TURBOKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(outs[i].data(), raw_.data() + i * out_bytes, out_bytes,
                                                   cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync");
    }
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, start_, stop_);
    last_kernel_seconds_ = ms / 1e3;
    // Unquantized sections (raw, fp16) on the host.
    const size_t vectors = codec.shape().vectors_per_section();
    const size_t section_out = vectors * codec.shape().head_dim * DTypeSize(out_dtype);
    for (int l = range.begin; l < end; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        const BlockCodec::SectionPlan& plan = codec.plans()[2 * l + kv];
        if (plan.codec.quantized()) continue;
        internal::SectionJob job{plan.codec, {}, codec.shape().head_dim, vectors, codec.shape().dtype};
        for (size_t i = 0; i < n; ++i) {
          internal::DecodeSectionScalar(job, packeds[i].data() + plan.offset, out_dtype,
                                        outs[i].data() + ((l - range.begin) * 2 + kv) * section_out);
        }
      }
    }
    return absl::OkStatus();
  }

 private:
  // Device copies of the codebooks (cached) and of this codec's QJL matrices (per call).
  absl::StatusOr<std::vector<DeviceSection>> Sections(const BlockCodec& codec, int begin, int end,
                                                      bool for_decode, DType out_dtype) {
    std::vector<DeviceSection> out;
    qjl_.clear();
    const BlockShape& shape = codec.shape();
    const size_t vectors = shape.vectors_per_section();
    const size_t section_out = vectors * shape.head_dim * DTypeSize(out_dtype);
    const size_t section_raw = vectors * shape.head_dim * DTypeSize(shape.dtype);
    for (int l = begin; l < end; ++l) {
      for (int kv = 0; kv < 2; ++kv) {
        const BlockCodec::SectionPlan& plan = codec.plans()[2 * l + kv];
        if (!plan.codec.quantized()) continue;
        TURBOKV_ASSIGN_OR_RETURN(const Codebook* cb, GetCodebook(plan.codec.group_size, plan.codec.bits));
        TURBOKV_ASSIGN_OR_RETURN(float* table, DeviceCodebook(*cb));
        DeviceSection s;
        s.params.g = plan.codec.group_size;
        s.params.bits = plan.codec.bits;
        s.params.levels = table;
        s.params.thresholds = table + cb->levels.size();
        s.params.norm_correction = codec.spec().norm_correction;
        s.params.sign_key = plan.sign_key;
        if (plan.codec.qjl) {
          DeviceBuffer& m = qjl_.emplace_back();
          const size_t bytes = plan.qjl_matrix->size() * sizeof(float);
          TURBOKV_RETURN_IF_ERROR(m.Reserve(bytes));
          TURBOKV_CUDA_RETURN_IF_ERROR(cudaMemcpy(m.ptr, plan.qjl_matrix->data(), bytes, cudaMemcpyHostToDevice),
                                       "cudaMemcpy");
          s.params.qjl = static_cast<const float*>(m.ptr);
          s.params.qjl_coef = static_cast<float>(internal::kSqrtHalfPi / s.params.g);
        }
        s.head_dim = shape.head_dim;
        s.groups_per_vector = shape.head_dim / s.params.g;
        s.lay = internal::LayoutOf(plan.codec, vectors, shape.head_dim, shape.dtype);
        s.groups = s.lay.groups;
        s.index_bytes = static_cast<size_t>(s.params.g) * s.params.bits / 8;
        s.packed_offset = plan.offset;
        // Encode reads the section from the raw block; decode writes it into the output block
        // that holds only layers [begin, end) in out_dtype.
        s.raw_offset = for_decode ? (2 * static_cast<size_t>(l - begin) + kv) * section_out
                                  : (2 * static_cast<size_t>(l) + kv) * section_raw;
        out.push_back(s);
      }
    }
    return out;
  }

  absl::StatusOr<float*> DeviceCodebook(const Codebook& cb) {
    const int key = cb.group_size * 16 + cb.bits;
    auto it = codebooks_.find(key);
    if (it != codebooks_.end()) return it->second;
    std::vector<float> table(cb.levels);
    table.insert(table.end(), cb.thresholds.begin(), cb.thresholds.end());
    void* ptr = nullptr;
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr, table.size() * sizeof(float)), "cudaMalloc");
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaMemcpy(ptr, table.data(), table.size() * sizeof(float), cudaMemcpyHostToDevice),
                                 "cudaMemcpy");
    codebooks_[key] = static_cast<float*>(ptr);
    return static_cast<float*>(ptr);
  }

  // Writes what the kernels do not: the header, raw / fp16 sections and the checksum.
  absl::Status FinishOnHost(const BlockCodec& codec, absl::Span<const uint8_t> raw, absl::Span<uint8_t> packed) {
    std::memcpy(packed.data(), codec.header().data(), codec.header().size());
    const BlockShape& shape = codec.shape();
    const size_t vectors = shape.vectors_per_section();
    const size_t section_raw = vectors * shape.head_dim * DTypeSize(shape.dtype);
    for (size_t s = 0; s < codec.plans().size(); ++s) {
      const BlockCodec::SectionPlan& plan = codec.plans()[s];
      if (plan.codec.quantized()) continue;
      internal::SectionJob job{plan.codec, {}, shape.head_dim, vectors, shape.dtype};
      const internal::EncodeError err =
          internal::EncodeSectionScalar(job, raw.data() + s * section_raw, packed.data() + plan.offset);
      if (err.kind != internal::EncodeError::kNone) return codec.Encode(raw, packed, CpuIsa::kScalar);
    }
    const size_t body = packed.size() - 8;
    const uint64_t sum = internal::Checksum(packed.first(body));
    std::memcpy(packed.data() + body, &sum, 8);
    return absl::OkStatus();
  }

  std::mutex mu_;
  int device_ = 0;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
  DeviceBuffer raw_, packed_, error_;
  std::deque<DeviceBuffer> qjl_;  // deque: buffers never move
  std::map<int, float*> codebooks_;
  double last_kernel_seconds_ = 0;
};

}  // namespace

bool CudaBuilt() { return true; }

absl::StatusOr<std::unique_ptr<CudaCodec>> CudaCodec::Create(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::UnavailableError(absl::StrCat(
        "no CUDA device is usable: ", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices found"));
  }
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device, " does not exist; ", count, " found"));
  }
  cudaDeviceProp prop;
  const cudaError_t pe = cudaGetDeviceProperties(&prop, device);
  if (pe != cudaSuccess) return CudaError(pe, "cudaGetDeviceProperties");
  auto codec = std::make_unique<CudaCodecImpl>(
      device, absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ")"));
  TURBOKV_RETURN_IF_ERROR(codec->Init());
  return codec;
}

}  // namespace turbokv::codec
