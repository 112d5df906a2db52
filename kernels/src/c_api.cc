#include "turbokv/codec/c_api.h"

#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "turbokv/codec/block_codec.h"
#include "turbokv/codec/cuda_codec.h"
#include "turbokv/codec/types.h"

struct tkv_codec {
  turbokv::codec::BlockCodec codec;
};

namespace {

using turbokv::codec::BlockCodec;
using turbokv::codec::CodecSpec;
using turbokv::codec::DType;

// One message per thread so that concurrent callers never read each other's errors.
thread_local std::string g_last_error;

int Fail(const absl::Status& s) {
  g_last_error = std::string(s.message());
  return static_cast<int>(s.code());
}

int Fail(absl::StatusCode code, std::string msg) {
  g_last_error = std::move(msg);
  return static_cast<int>(code);
}

bool ValidDType(int32_t d) { return d >= 1 && d <= 3; }

// One CUDA codec per device, created on first use and kept (a failed creation is retried).
absl::StatusOr<turbokv::codec::CudaCodec*> CudaFor(int32_t device) {
  static std::mutex mu;
  static std::map<int32_t, std::unique_ptr<turbokv::codec::CudaCodec>>* codecs =
      new std::map<int32_t, std::unique_ptr<turbokv::codec::CudaCodec>>();
  std::lock_guard<std::mutex> l(mu);
  auto it = codecs->find(device);
  if (it != codecs->end()) return it->second.get();
  turbokv::codec::CudaCodecOptions options;
  options.device = device;
  absl::StatusOr<std::unique_ptr<turbokv::codec::CudaCodec>> c =
      turbokv::codec::CudaCodec::Create(options);
  if (!c.ok()) return c.status();
  turbokv::codec::CudaCodec* raw = c->get();
  (*codecs)[device] = *std::move(c);
  return raw;
}

}  // namespace

extern "C" {

int tkv_api_version(void) { return TURBOKV_C_API_VERSION; }

const char* tkv_last_error(void) { return g_last_error.c_str(); }

int tkv_preset_params(const char* preset, int32_t head_dim, tkv_codec_params* params) {
  if (preset == nullptr || params == nullptr) {
    return Fail(absl::StatusCode::kInvalidArgument, "preset and params must not be null");
  }
  auto spec = turbokv::codec::PresetSpec(preset, head_dim);
  if (!spec.ok()) return Fail(spec.status());
  params->key_bits = spec->key.bits;
  params->key_group_size = spec->key.group_size;
  params->key_qjl = spec->key.qjl ? 1 : 0;
  params->value_bits = spec->value.bits;
  params->value_group_size = spec->value.group_size;
  params->value_qjl = spec->value.qjl ? 1 : 0;
  params->protected_first_layers = spec->protected_first_layers;
  params->protected_last_layers = spec->protected_last_layers;
  params->protected_bits = spec->protected_bits;
  params->norm_correction = spec->norm_correction ? 1 : 0;
  params->rotation_seed = spec->rotation_seed;
  params->qjl_seed = spec->qjl_seed;
  return 0;
}

int tkv_codec_create(const tkv_shape* shape, const tkv_codec_params* params, uint64_t namespace_id,
                     tkv_codec** out) {
  if (shape == nullptr || params == nullptr || out == nullptr) {
    return Fail(absl::StatusCode::kInvalidArgument, "shape, params and out must not be null");
  }
  *out = nullptr;
  if (!ValidDType(shape->dtype)) {
    return Fail(absl::StatusCode::kInvalidArgument, "dtype code " + std::to_string(shape->dtype) +
                                                        " is not 1 (fp16), 2 (bf16) or 3 (fp32)");
  }
  turbokv::codec::BlockShape s;
  s.num_layers = shape->num_layers;
  s.block_tokens = shape->block_tokens;
  s.num_kv_heads = shape->num_kv_heads;
  s.head_dim = shape->head_dim;
  s.dtype = static_cast<DType>(shape->dtype);
  CodecSpec spec;
  spec.key = {params->key_bits, params->key_group_size, params->key_qjl != 0};
  spec.value = {params->value_bits, params->value_group_size, params->value_qjl != 0};
  spec.protected_first_layers = params->protected_first_layers;
  spec.protected_last_layers = params->protected_last_layers;
  spec.protected_bits = params->protected_bits;
  spec.norm_correction = params->norm_correction != 0;
  spec.rotation_seed = params->rotation_seed;
  spec.qjl_seed = params->qjl_seed;
  auto codec = BlockCodec::Create(s, spec, namespace_id);
  if (!codec.ok()) return Fail(codec.status());
  try {
    *out = new tkv_codec{*std::move(codec)};
  } catch (const std::exception& e) {
    return Fail(absl::StatusCode::kResourceExhausted, e.what());
  }
  return 0;
}

void tkv_codec_destroy(tkv_codec* codec) { delete codec; }

size_t tkv_codec_raw_bytes(const tkv_codec* codec) { return codec->codec.raw_bytes(); }

size_t tkv_codec_packed_bytes(const tkv_codec* codec) { return codec->codec.packed_bytes(); }

double tkv_codec_bits_per_value(const tkv_codec* codec) { return codec->codec.bits_per_value(); }

int tkv_codec_encode(const tkv_codec* codec, const void* raw, size_t raw_len, void* packed,
                     size_t packed_len) {
  if (codec == nullptr || raw == nullptr || packed == nullptr) {
    return Fail(absl::StatusCode::kInvalidArgument, "codec, raw and packed must not be null");
  }
  absl::Status s =
      codec->codec.Encode(absl::MakeConstSpan(static_cast<const uint8_t*>(raw), raw_len),
                          absl::MakeSpan(static_cast<uint8_t*>(packed), packed_len));
  return s.ok() ? 0 : Fail(s);
}

int tkv_codec_decode(const tkv_codec* codec, const void* packed, size_t packed_len,
                     int32_t out_dtype, int32_t layer_begin, int32_t layer_end, void* out,
                     size_t out_len, int32_t verify_checksum) {
  if (codec == nullptr || packed == nullptr || out == nullptr) {
    return Fail(absl::StatusCode::kInvalidArgument, "codec, packed and out must not be null");
  }
  if (!ValidDType(out_dtype)) {
    return Fail(absl::StatusCode::kInvalidArgument,
                "out dtype code " + std::to_string(out_dtype) + " is not 1, 2 or 3");
  }
  auto in = absl::MakeConstSpan(static_cast<const uint8_t*>(packed), packed_len);
  if (verify_checksum) {
    absl::Status v = turbokv::codec::VerifyPackedChecksum(in);
    if (!v.ok()) return Fail(v);
  }
  absl::Status s = codec->codec.Decode(in, static_cast<DType>(out_dtype),
                                       turbokv::codec::LayerRange{layer_begin, layer_end},
                                       absl::MakeSpan(static_cast<uint8_t*>(out), out_len));
  return s.ok() ? 0 : Fail(s);
}

int tkv_cuda_available(int32_t device) {
  absl::StatusOr<turbokv::codec::CudaCodec*> c = CudaFor(device);
  return c.ok() ? 0 : Fail(c.status());
}

int tkv_cuda_decode_to_device(const tkv_codec* codec, int32_t device, const void* const* packed,
                              const size_t* packed_len, size_t n, int32_t out_dtype,
                              int32_t layer_begin, int32_t layer_end, void* out_device,
                              size_t out_len, void* stream, int32_t verify_checksum,
                              int32_t* block_codes) {
  if (codec == nullptr || (n > 0 && (packed == nullptr || packed_len == nullptr)) ||
      out_device == nullptr) {
    return Fail(absl::StatusCode::kInvalidArgument,
                "codec, packed, packed_len and out_device must not be null");
  }
  if (!ValidDType(out_dtype)) {
    return Fail(absl::StatusCode::kInvalidArgument,
                "out dtype code " + std::to_string(out_dtype) + " is not 1, 2 or 3");
  }
  absl::StatusOr<turbokv::codec::CudaCodec*> cuda = CudaFor(device);
  if (!cuda.ok()) return Fail(cuda.status());
  std::vector<absl::Span<const uint8_t>> blocks(n);
  std::vector<absl::Status> status(n);
  for (size_t i = 0; i < n; ++i)
    blocks[i] = absl::MakeConstSpan(static_cast<const uint8_t*>(packed[i]), packed_len[i]);
  if (verify_checksum) {
    // A block that fails its checksum is decoded as zeros: stage it as a foreign block.
    for (size_t i = 0; i < n; ++i) {
      status[i] = turbokv::codec::VerifyPackedChecksum(blocks[i]);
      if (!status[i].ok()) blocks[i] = {};
    }
  }
  std::vector<absl::Status> decoded(n);
  const absl::Status s =
      (*cuda)->DecodeToDevice(codec->codec, blocks, static_cast<DType>(out_dtype),
                              turbokv::codec::LayerRange{layer_begin, layer_end}, out_device,
                              out_len, stream, absl::MakeSpan(decoded));
  if (!s.ok()) return Fail(s);
  for (size_t i = 0; i < n; ++i) {
    if (status[i].ok()) status[i] = decoded[i];
  }
  int first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (block_codes != nullptr) block_codes[i] = static_cast<int32_t>(status[i].code());
    if (!status[i].ok() && first == 0) {
      first = Fail(status[i].code(), absl::StrCat("block ", i, ": ", status[i].message()));
    }
  }
  return first;
}

}  // extern "C"
