// CUDA backend (cuda_codec.h): device constants, staging and streams. cudaError_t stays inside
// this folder: CudaStatus below is the one conversion to absl::Status.
#include "turbokv/codec/cuda_codec.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec_kernels.h"
#include "format.h"
#include "gpu_plan.h"
#include "turbokv/codec/codebook.h"
#include "turbokv/codec/status_macros.h"

namespace turbokv::codec {
namespace {

using internal::GpuPlan;
using internal::GroupLaunch;
using internal::PlainLaunch;

// Out of memory is ResourceExhausted (the call fails, the codec stays usable); every other
// CUDA error is Internal and disables the codec.
absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // not sticky: clear it
    return absl::ResourceExhaustedError(
        absl::StrCat("CUDA ", what, ": out of device or pinned memory"));
  }
  return absl::InternalError(
      absl::StrCat("CUDA ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

#define TURBOKV_CUDA_RETURN_IF_ERROR(expr, what) TURBOKV_RETURN_IF_ERROR(CudaStatus((expr), what))

// Grow-only device or pinned host buffer.
template <bool kPinned>
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { Free(); }
  absl::Status Reserve(size_t bytes) {
    if (bytes <= capacity_) return absl::OkStatus();
    Free();
    bytes = internal::AlignUp(bytes, size_t{1} << 20);
    if constexpr (kPinned) {
      TURBOKV_CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr_, bytes), "cudaMallocHost");
    } else {
      TURBOKV_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes), "cudaMalloc");
    }
    capacity_ = bytes;
    return absl::OkStatus();
  }
  uint8_t* data() const { return static_cast<uint8_t*>(ptr_); }

 private:
  void Free() {
    if (ptr_ == nullptr) return;
    if constexpr (kPinned) {
      cudaFreeHost(ptr_);
    } else {
      cudaFree(ptr_);
    }
    ptr_ = nullptr;
    capacity_ = 0;
  }
  void* ptr_ = nullptr;
  size_t capacity_ = 0;
};
using DeviceBuffer = Buffer<false>;
using PinnedBuffer = Buffer<true>;

// One codec on the device: its aligned layout and uploaded constants.
struct DevicePlan {
  GpuPlan plan;
  DeviceBuffer blob;
  std::vector<GroupLaunch> encode;  // launch templates for all layers (pointers unset)
};

// The device side of one chunk in flight: a stream and its buffers.
struct Lane {
  cudaStream_t stream = nullptr;
  cudaEvent_t kernels_begin = nullptr, kernels_end = nullptr, done = nullptr;
  PinnedBuffer host_in, host_out;
  DeviceBuffer dev_in, dev_out, dev_errors;
  // The chunk in flight: block indices into the caller's spans.
  size_t first = 0, count = 0;
  bool busy = false;
};

struct Slot {
  Lane lanes[2];
};

class CudaCodecImpl final : public CudaCodec {
 public:
  CudaCodecImpl(const CudaCodecOptions& options, std::string name, int sm_count)
      : options_(options), name_(std::move(name)), max_ctas_(sm_count * 16) {}

  ~CudaCodecImpl() override {
    cudaSetDevice(options_.device);
    for (auto& slot : slots_) {
      for (Lane& l : slot->lanes) {
        if (l.stream != nullptr) cudaStreamSynchronize(l.stream);
        for (cudaEvent_t e : {l.kernels_begin, l.kernels_end, l.done}) {
          if (e != nullptr) cudaEventDestroy(e);
        }
        if (l.stream != nullptr) cudaStreamDestroy(l.stream);
      }
    }
  }

  absl::Status Init() {
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device), "cudaSetDevice");
    for (int i = 0; i < options_.max_concurrent_calls; ++i) {
      auto slot = std::make_unique<Slot>();
      for (Lane& l : slot->lanes) {
        TURBOKV_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking),
                                     "cudaStreamCreate");
        TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventCreate(&l.kernels_begin), "cudaEventCreate");
        TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventCreate(&l.kernels_end), "cudaEventCreate");
        TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&l.done, cudaEventDisableTiming),
                                     "cudaEventCreate");
      }
      free_slots_.push_back(slot.get());
      slots_.push_back(std::move(slot));
    }
    return absl::OkStatus();
  }

  std::string DeviceName() const override { return name_; }
  bool healthy() const override { return healthy_.load(); }
  double last_kernel_seconds() const override { return last_kernel_seconds_.load(); }

  absl::Status EncodeBatch(const BlockCodec& codec,
                           absl::Span<const absl::Span<const uint8_t>> raws,
                           absl::Span<const absl::Span<uint8_t>> packeds,
                           absl::Span<absl::Status> block_status) override {
    if (raws.size() != packeds.size() || block_status.size() != raws.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("EncodeBatch got ", raws.size(), " raw blocks, ", packeds.size(),
                       " outputs and ", block_status.size(), " status slots"));
    }
    // Blocks of the wrong size fail alone (the CPU codec's message); the rest go to the device.
    std::vector<size_t> todo;
    for (size_t i = 0; i < raws.size(); ++i) {
      block_status[i] = absl::OkStatus();
      if (raws[i].size() != codec.raw_bytes() || packeds[i].size() != codec.packed_bytes()) {
        block_status[i] = codec.Encode(raws[i], packeds[i], CpuIsa::kScalar);
      } else {
        todo.push_back(i);
      }
    }
    if (todo.empty()) return absl::OkStatus();
    if (!HasQuantized(codec)) {  // raw / fp16 sections only: a copy, nothing for the device
      for (size_t i : todo) block_status[i] = codec.Encode(raws[i], packeds[i]);
      return absl::OkStatus();
    }
    return Guard(RunEncode(codec, raws, packeds, block_status, todo));
  }

  absl::Status DecodeBatch(const BlockCodec& codec,
                           absl::Span<const absl::Span<const uint8_t>> packeds, DType out_dtype,
                           LayerRange range, absl::Span<const absl::Span<uint8_t>> outs,
                           absl::Span<absl::Status> block_status) override {
    if (packeds.size() != outs.size() || block_status.size() != packeds.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DecodeBatch got ", packeds.size(), " packed blocks, ", outs.size(),
                       " outputs and ", block_status.size(), " status slots"));
    }
    TURBOKV_ASSIGN_OR_RETURN(const size_t out_bytes, codec.DecodedBytes(out_dtype, range));
    std::vector<size_t> todo;
    for (size_t i = 0; i < packeds.size(); ++i) {
      block_status[i] = outs[i].size() == out_bytes
                            ? CheckPacked(codec, packeds[i])
                            : codec.Decode(packeds[i], out_dtype, range, outs[i]);
      if (block_status[i].ok()) todo.push_back(i);
    }
    if (todo.empty()) return absl::OkStatus();
    if (!HasQuantized(codec)) {
      for (size_t i : todo) block_status[i] = codec.Decode(packeds[i], out_dtype, range, outs[i]);
      return absl::OkStatus();
    }
    return Guard(RunDecode(
        codec, packeds, out_dtype, range, todo, out_bytes,
        [&](size_t i, const uint8_t* host) { std::memcpy(outs[i].data(), host, out_bytes); },
        nullptr, nullptr));
  }

  absl::Status DecodeToDevice(const BlockCodec& codec,
                              absl::Span<const absl::Span<const uint8_t>> packeds, DType out_dtype,
                              LayerRange range, void* out_device, size_t out_bytes, void* stream,
                              absl::Span<absl::Status> block_status) override {
    TURBOKV_ASSIGN_OR_RETURN(const size_t block_out, codec.DecodedBytes(out_dtype, range));
    if (block_status.size() != packeds.size()) {
      return absl::InvalidArgumentError("DecodeToDevice needs one status slot per packed block");
    }
    if (out_bytes != packeds.size() * block_out) {
      return absl::InvalidArgumentError(absl::StrCat("device output is ", out_bytes, " bytes; ",
                                                     packeds.size(), " blocks of ", block_out,
                                                     " bytes need ", packeds.size() * block_out));
    }
    if (reinterpret_cast<uintptr_t>(out_device) % internal::kDeviceAlign != 0) {
      return absl::InvalidArgumentError("device output must be 16-byte aligned");
    }
    if (packeds.empty()) return absl::OkStatus();
    // Every block keeps its place in the output; one that fails is staged as zeros (all scales
    // zero decode to zeros).
    std::vector<size_t> todo;
    for (size_t i = 0; i < packeds.size(); ++i) {
      block_status[i] = CheckPacked(codec, packeds[i]);
      todo.push_back(i);
    }
    return Guard(RunDecode(codec, packeds, out_dtype, range, todo, block_out, nullptr,
                           static_cast<uint8_t*>(out_device), static_cast<cudaStream_t>(stream),
                           block_status));
  }

 private:
  // The first CUDA error disables the codec (a sticky error leaves the context unusable).
  absl::Status Guard(absl::Status s) {
    if (s.ok() || s.code() != absl::StatusCode::kInternal) return s;
    std::lock_guard<std::mutex> l(mu_);
    if (healthy_.exchange(false)) first_error_ = std::string(s.message());
    return s;
  }

  absl::Status CheckHealthy() {
    if (healthy_.load()) return absl::OkStatus();
    std::lock_guard<std::mutex> l(mu_);
    return absl::UnavailableError(
        absl::StrCat("the CUDA codec was disabled by an earlier error: ", first_error_));
  }

  static bool HasQuantized(const BlockCodec& codec) {
    for (const BlockCodec::SectionPlan& p : codec.plans()) {
      if (p.codec.quantized()) return true;
    }
    return false;
  }

  // OK when `packed` is a whole block of this codec (checksum not verified); else the CPU
  // decoder's error.
  static absl::Status CheckPacked(const BlockCodec& codec, absl::Span<const uint8_t> packed) {
    const absl::Span<const uint8_t> h = codec.header();
    if (packed.size() == codec.packed_bytes() &&
        std::memcmp(packed.data(), h.data(), h.size()) == 0) {
      return absl::OkStatus();
    }
    std::vector<uint8_t> sink(*codec.DecodedBytes(DType::kFloat16, {0, 1}));
    absl::Status s = codec.Decode(packed, DType::kFloat16, {0, 1}, absl::MakeSpan(sink));
    return s.ok() ? absl::InternalError("packed block check disagrees with the decoder") : s;
  }

  // A staging slot for the duration of one call.
  class SlotLease {
   public:
    explicit SlotLease(CudaCodecImpl* c) : c_(c) {
      std::unique_lock<std::mutex> l(c_->mu_);
      c_->slot_cv_.wait(l, [this] { return !c_->free_slots_.empty(); });
      slot_ = c_->free_slots_.back();
      c_->free_slots_.pop_back();
    }
    ~SlotLease() {
      {
        std::lock_guard<std::mutex> l(c_->mu_);
        c_->free_slots_.push_back(slot_);
      }
      c_->slot_cv_.notify_one();
    }
    Slot& slot() { return *slot_; }

   private:
    CudaCodecImpl* c_;
    Slot* slot_;
  };

  // The device constants of `codec`, uploaded on first use.
  absl::StatusOr<std::shared_ptr<DevicePlan>> PlanFor(const BlockCodec& codec) {
    std::string key(reinterpret_cast<const char*>(codec.header().data()), codec.header().size());
    std::memset(key.data() + 8, 0, 8);  // the namespace id does not change the device constants
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = plans_.find(key);
      if (it != plans_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second.second);
        return it->second.first;
      }
    }
    auto plan = std::make_shared<DevicePlan>();
    plan->plan = internal::MakeGpuPlan(codec);
    TURBOKV_RETURN_IF_ERROR(plan->blob.Reserve(plan->plan.blob.size()));
    const uintptr_t base = reinterpret_cast<uintptr_t>(plan->blob.data());
    const std::vector<uint8_t> blob = internal::MaterializeBlob(plan->plan, codec, base);
    TURBOKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(plan->blob.data(), blob.data(), blob.size(), cudaMemcpyHostToDevice),
        "cudaMemcpy (codec constants)");
    plan->encode = internal::MakeLaunches(plan->plan, codec, base, 0, codec.shape().num_layers, 0,
                                          codec.shape().dtype);
    for (GroupLaunch& a : plan->encode) {
      TURBOKV_ASSIGN_OR_RETURN(a.codebook, CodebookFor(a.group_size, a.bits));
    }
    std::lock_guard<std::mutex> l(mu_);
    auto [it, inserted] = plans_.try_emplace(key);
    if (!inserted) return it->second.first;  // another thread uploaded it meanwhile
    lru_.push_front(key);
    it->second = {plan, lru_.begin()};
    while (plans_.size() > static_cast<size_t>(std::max(1, options_.max_cached_codecs))) {
      plans_.erase(lru_.back());  // freed when the last call using it returns
      lru_.pop_back();
    }
    return plan;
  }

  // The (g, bits) codebook on the device (cached for the life of the codec).
  absl::StatusOr<internal::CodebookTables> CodebookFor(int g, int bits) {
    std::lock_guard<std::mutex> l(codebook_mu_);
    const int key = g * 16 + bits;
    auto it = codebooks_.find(key);
    if (it != codebooks_.end()) return it->second.second;
    TURBOKV_ASSIGN_OR_RETURN(const Codebook* cb, GetCodebook(g, bits));
    internal::CodebookTables tables;
    const std::vector<uint8_t> bytes = internal::MakeCodebookBlob(*cb, &tables);
    auto buffer = std::make_unique<DeviceBuffer>();
    TURBOKV_RETURN_IF_ERROR(buffer->Reserve(bytes.size()));
    TURBOKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(buffer->data(), bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
        "cudaMemcpy (codebook)");
    tables = internal::RebaseCodebook(tables, reinterpret_cast<uintptr_t>(buffer->data()));
    codebooks_[key] = {std::move(buffer), tables};
    return tables;
  }

  static double Elapsed(const Lane& l) {
    float ms = 0;
    return cudaEventElapsedTime(&ms, l.kernels_begin, l.kernels_end) == cudaSuccess ? ms / 1e3
                                                                                    : 0.0;
  }

  // The two-lane pipeline of RunEncode and RunDecode: n blocks in chunks of per_chunk, chunk c
  // on lane c % 2, so the host stages chunk c + 1 while chunk c is on the device.
  // `enqueue(lane, first, count)` queues one chunk (its last step records lane.done) and marks
  // the lane busy when all of it was queued; `finish(lane)` waits for a busy lane and collects
  // its chunk. After an error the lanes still in flight are waited for, not collected: their
  // buffers must be idle before the slot is reused.
  template <class Enqueue, class Finish>
  static absl::Status RunChunks(Slot& slot, size_t n, size_t per_chunk, Enqueue&& enqueue,
                                Finish&& finish) {
    absl::Status status;
    size_t chunk = 0;
    for (size_t first = 0; first < n && status.ok(); first += per_chunk, ++chunk) {
      Lane& lane = slot.lanes[chunk % 2];
      if (lane.busy) {
        status = finish(lane);
        if (!status.ok()) break;
      }
      status = enqueue(lane, first, std::min(per_chunk, n - first));
    }
    for (Lane& lane : slot.lanes) {
      if (!lane.busy) continue;
      if (status.ok()) {
        status = finish(lane);
      } else {
        cudaEventSynchronize(lane.done);
        lane.busy = false;
      }
    }
    return status;
  }

  // Encode: chunk c of `todo` on lane c % 2; the host stages chunk c + 1 while chunk c runs.
  absl::Status RunEncode(const BlockCodec& codec, absl::Span<const absl::Span<const uint8_t>> raws,
                         absl::Span<const absl::Span<uint8_t>> packeds,
                         absl::Span<absl::Status> block_status, const std::vector<size_t>& todo) {
    TURBOKV_RETURN_IF_ERROR(CheckHealthy());
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device), "cudaSetDevice");
    TURBOKV_ASSIGN_OR_RETURN(std::shared_ptr<DevicePlan> plan, PlanFor(codec));
    SlotLease lease(this);
    const size_t raw_bytes = codec.raw_bytes();
    const size_t aligned_bytes = plan->plan.aligned_block_bytes;
    const size_t per_chunk = std::max<size_t>(1, options_.chunk_bytes / raw_bytes);
    double kernel_seconds = 0;

    auto finish = [&](Lane& lane) -> absl::Status {
      TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(lane.done), "encode");
      kernel_seconds += Elapsed(lane);
      const uint32_t* errors =
          reinterpret_cast<const uint32_t*>(lane.host_out.data() + lane.count * aligned_bytes);
      for (size_t j = 0; j < lane.count; ++j) {
        const size_t i = todo[lane.first + j];
        if (errors[j] != 0) {
          // Bad input or a scale beyond fp16: the CPU encode names the position of a
          // non-finite value, or writes the block with the group's wide scale (FORMAT.md).
          block_status[i] = codec.Encode(raws[i], packeds[i], CpuIsa::kScalar);
          continue;
        }
        internal::AlignedToPacked(plan->plan, lane.host_out.data() + j * aligned_bytes,
                                  packeds[i].data());
        block_status[i] = internal::FinishPackedBlock(codec, raws[i], packeds[i]);
      }
      lane.busy = false;
      return absl::OkStatus();
    };

    absl::Status status = RunChunks(
        lease.slot(), todo.size(), per_chunk,
        [&](Lane& lane, size_t first, size_t count) {
          return EnqueueEncode(*plan, raws, todo, first, count, raw_bytes, aligned_bytes, lane);
        },
        finish);
    if (status.ok()) last_kernel_seconds_.store(kernel_seconds);
    return status;
  }

  absl::Status EnqueueEncode(const DevicePlan& plan,
                             absl::Span<const absl::Span<const uint8_t>> raws,
                             const std::vector<size_t>& todo, size_t first, size_t count,
                             size_t raw_bytes, size_t aligned_bytes, Lane& lane) {
    TURBOKV_RETURN_IF_ERROR(lane.host_in.Reserve(count * raw_bytes));
    TURBOKV_RETURN_IF_ERROR(lane.host_out.Reserve(count * (aligned_bytes + sizeof(uint32_t))));
    TURBOKV_RETURN_IF_ERROR(lane.dev_in.Reserve(count * raw_bytes));
    TURBOKV_RETURN_IF_ERROR(lane.dev_out.Reserve(count * aligned_bytes));
    TURBOKV_RETURN_IF_ERROR(lane.dev_errors.Reserve(count * sizeof(uint32_t)));
    for (size_t j = 0; j < count; ++j) {
      std::memcpy(lane.host_in.data() + j * raw_bytes, raws[todo[first + j]].data(), raw_bytes);
    }
    const cudaStream_t s = lane.stream;
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(lane.dev_in.data(), lane.host_in.data(),
                                                 count * raw_bytes, cudaMemcpyHostToDevice, s),
                                 "cudaMemcpyAsync (raw blocks)");
    TURBOKV_CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(lane.dev_errors.data(), 0, count * sizeof(uint32_t), s), "cudaMemsetAsync");
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventRecord(lane.kernels_begin, s), "cudaEventRecord");
    for (GroupLaunch a : plan.encode) {
      a.blocks = static_cast<uint32_t>(count);
      a.values = lane.dev_in.data();
      a.aligned = lane.dev_out.data();
      a.errors = reinterpret_cast<uint32_t*>(lane.dev_errors.data());
      TURBOKV_CUDA_RETURN_IF_ERROR(internal::LaunchEncodeGroups(a, max_ctas_, s),
                                   "encode kernel launch");
    }
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventRecord(lane.kernels_end, s), "cudaEventRecord");
    // Only the quantized parts come back (they lead every aligned block).
    TURBOKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpy2DAsync(lane.host_out.data(), aligned_bytes, lane.dev_out.data(), aligned_bytes,
                          plan.plan.quantized_bytes, count, cudaMemcpyDeviceToHost, s),
        "cudaMemcpy2DAsync (packed parts)");
    TURBOKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(lane.host_out.data() + count * aligned_bytes, lane.dev_errors.data(),
                        count * sizeof(uint32_t), cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync (error flags)");
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventRecord(lane.done, s), "cudaEventRecord");
    lane.first = first;
    lane.count = count;
    lane.busy = true;
    return absl::OkStatus();
  }

  // Decode of todo's blocks, chunked like RunEncode. Host output: `deliver(i, bytes)` copies
  // block i's decoded values out of the pinned buffer. Device output (`device_out`): the
  // kernels write there directly, on `user_stream`; failed blocks (block_status) decode zeros.
  template <class Deliver>
  absl::Status RunDecode(const BlockCodec& codec,
                         absl::Span<const absl::Span<const uint8_t>> packeds, DType out_dtype,
                         LayerRange range, const std::vector<size_t>& todo, size_t out_bytes,
                         Deliver deliver, uint8_t* device_out, cudaStream_t user_stream,
                         absl::Span<absl::Status> block_status = {}) {
    TURBOKV_RETURN_IF_ERROR(CheckHealthy());
    TURBOKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device), "cudaSetDevice");
    TURBOKV_ASSIGN_OR_RETURN(std::shared_ptr<DevicePlan> plan, PlanFor(codec));
    SlotLease lease(this);
    const int end = range.end < 0 ? codec.shape().num_layers : range.end;
    const uintptr_t base = reinterpret_cast<uintptr_t>(plan->blob.data());
    std::vector<GroupLaunch> launches =
        internal::MakeLaunches(plan->plan, codec, base, range.begin, end, 0, out_dtype);
    for (GroupLaunch& a : launches) {
      TURBOKV_ASSIGN_OR_RETURN(a.codebook, CodebookFor(a.group_size, a.bits));
    }
    const PlainLaunch plain =
        internal::MakePlainLaunch(plan->plan, codec, base, range.begin, end, 0, out_dtype);
    const size_t aligned_bytes = plan->plan.aligned_block_bytes;
    const size_t per_chunk =
        std::max<size_t>(1, options_.chunk_bytes / std::max(out_bytes, codec.packed_bytes()));
    const bool to_device = device_out != nullptr;
    double kernel_seconds = 0;

    auto finish = [&](Lane& lane) -> absl::Status {
      TURBOKV_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(lane.done), "decode");
      kernel_seconds += Elapsed(lane);
      if (!to_device) {
        for (size_t j = 0; j < lane.count; ++j) {
          if constexpr (!std::is_same_v<Deliver, std::nullptr_t>) {
            deliver(todo[lane.first + j], lane.host_out.data() + j * out_bytes);
          }
        }
      }
      lane.busy = false;
      return absl::OkStatus();
    };

    auto enqueue = [&](Lane& lane, size_t first, size_t count) -> absl::Status {
      // Stage the chunk in the aligned layout (the host copy that replaces a plain one).
      absl::Status status = lane.host_in.Reserve(count * aligned_bytes);
      if (status.ok()) status = lane.dev_in.Reserve(count * aligned_bytes);
      if (status.ok() && !to_device) status = lane.dev_out.Reserve(count * out_bytes);
      if (status.ok() && !to_device) status = lane.host_out.Reserve(count * out_bytes);
      if (!status.ok()) return status;
      for (size_t j = 0; j < count; ++j) {
        const size_t i = todo[first + j];
        uint8_t* staged = lane.host_in.data() + j * aligned_bytes;
        if (!block_status.empty() && !block_status[i].ok()) {
          std::memset(staged, 0, aligned_bytes);
        } else {
          internal::PackedToAligned(plan->plan, packeds[i].data(), range.begin, end, staged);
        }
      }
      // Device output: the user's stream, so the decode follows the work queued there; the
      // lane's event still tells when its staging buffer is free again.
      const cudaStream_t s = to_device ? user_stream : lane.stream;
      uint8_t* values = to_device ? device_out + todo[first] * out_bytes : lane.dev_out.data();
      status = CudaStatus(cudaMemcpyAsync(lane.dev_in.data(), lane.host_in.data(),
                                          count * aligned_bytes, cudaMemcpyHostToDevice, s),
                          "cudaMemcpyAsync (packed blocks)");
      if (status.ok())
        status = CudaStatus(cudaEventRecord(lane.kernels_begin, s), "cudaEventRecord");
      for (GroupLaunch a : launches) {
        if (!status.ok()) break;
        a.blocks = static_cast<uint32_t>(count);
        a.values = values;
        a.aligned = lane.dev_in.data();
        status = CudaStatus(internal::LaunchDecodeGroups(a, max_ctas_, s), "decode kernel launch");
      }
      if (status.ok() && plain.num_sections > 0) {
        PlainLaunch p = plain;
        p.blocks = static_cast<uint32_t>(count);
        p.values = values;
        p.aligned = lane.dev_in.data();
        status =
            CudaStatus(internal::LaunchDecodePlain(p, max_ctas_, s), "plain decode kernel launch");
      }
      if (status.ok()) status = CudaStatus(cudaEventRecord(lane.kernels_end, s), "cudaEventRecord");
      if (status.ok() && !to_device) {
        status = CudaStatus(cudaMemcpyAsync(lane.host_out.data(), values, count * out_bytes,
                                            cudaMemcpyDeviceToHost, s),
                            "cudaMemcpyAsync (decoded blocks)");
      }
      if (status.ok()) status = CudaStatus(cudaEventRecord(lane.done, s), "cudaEventRecord");
      lane.first = first;
      lane.count = count;
      lane.busy = status.ok();
      return status;
    };
    absl::Status status = RunChunks(lease.slot(), todo.size(), per_chunk, enqueue, finish);
    if (status.ok()) last_kernel_seconds_.store(kernel_seconds);
    return status;
  }

  const CudaCodecOptions options_;
  const std::string name_;
  const int max_ctas_;

  std::mutex mu_;  // guards free_slots_, plans_, lru_, first_error_
  std::condition_variable slot_cv_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<Slot*> free_slots_;
  std::list<std::string> lru_;
  std::unordered_map<std::string,
                     std::pair<std::shared_ptr<DevicePlan>, std::list<std::string>::iterator>>
      plans_;
  std::string first_error_;
  std::atomic<bool> healthy_{true};

  std::mutex codebook_mu_;
  std::map<int, std::pair<std::unique_ptr<DeviceBuffer>, internal::CodebookTables>> codebooks_;

  std::atomic<double> last_kernel_seconds_{0};
};

}  // namespace

bool CudaBuilt() { return true; }

absl::StatusOr<std::unique_ptr<CudaCodec>> CudaCodec::Create(const CudaCodecOptions& options) {
  if (options.max_concurrent_calls < 1 || options.chunk_bytes == 0 ||
      options.max_cached_codecs < 1) {
    return absl::InvalidArgumentError(
        "CudaCodecOptions: max_concurrent_calls, chunk_bytes and max_cached_codecs must be "
        "positive");
  }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    return absl::UnavailableError(
        absl::StrCat("no CUDA device is usable: ",
                     e != cudaSuccess ? cudaGetErrorString(e) : "0 devices found"));
  }
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", options.device, " does not exist; ", count, " found"));
  }
  cudaDeviceProp prop;
  TURBOKV_RETURN_IF_ERROR(
      CudaStatus(cudaGetDeviceProperties(&prop, options.device), "cudaGetDeviceProperties"));
  auto codec = std::make_unique<CudaCodecImpl>(
      options, absl::StrCat(prop.name, " (sm_", prop.major, prop.minor, ")"),
      prop.multiProcessorCount);
  TURBOKV_RETURN_IF_ERROR(codec->Init());
  return codec;
}

}  // namespace turbokv::codec
