// C ABI over turbokv::codec::BlockCodec, for other languages (the Python `turbokv.codec`
// wrapper loads it with ctypes). It exposes exactly the codec the server runs: the packed
// bytes produced here equal what a server stores for the same shape, spec and namespace id.
//
// Status: every function that can fail returns an int status code (0 = OK; otherwise the
// absl/gRPC code: 3 InvalidArgument, 15 DataLoss, 13 Internal, ...) and sets a per-thread
// message readable with tkv_last_error() until the next failing call on that thread.
//
// Thread safety: a tkv_codec is immutable after creation; any number of threads may encode
// and decode with it at once. tkv_codec_destroy must not race with other calls on it.
#ifndef TURBOKV_CODEC_C_API_H_
#define TURBOKV_CODEC_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// ABI version of this header; bumped on any incompatible change.
#define TURBOKV_C_API_VERSION 1

typedef struct tkv_codec tkv_codec;

// dtype codes (kernels/FORMAT.md): 1 fp16, 2 bf16, 3 fp32.
typedef struct tkv_shape {
  int32_t num_layers;
  int32_t block_tokens;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t dtype;
} tkv_shape;

// Explicit codec parameters (CodecSpec in types.h). bits: 0 raw, 1-4 or 8 TurboQuant, 16 fp16.
typedef struct tkv_codec_params {
  int32_t key_bits;
  int32_t key_group_size;
  int32_t key_qjl;  // 0/1
  int32_t value_bits;
  int32_t value_group_size;
  int32_t value_qjl;  // 0/1
  int32_t protected_first_layers;
  int32_t protected_last_layers;
  int32_t protected_bits;   // 8 or 16
  int32_t norm_correction;  // 0/1
  uint64_t rotation_seed;
  uint64_t qjl_seed;
} tkv_codec_params;

// TURBOKV_C_API_VERSION of the loaded library.
int tkv_api_version(void);
// The message of the last failing call on this thread ("" when none). Owned by the library.
const char* tkv_last_error(void);

// Fills *params with the spec of a preset ("k8v4", "k4v4-g32", ..., "raw")
// for this head_dim, default seeds included. InvalidArgument for an unknown name.
int tkv_preset_params(const char* preset, int32_t head_dim, tkv_codec_params* params);

// Creates a codec; *out receives it (free with tkv_codec_destroy). InvalidArgument when the
// shape or parameters are invalid (the message names the field).
int tkv_codec_create(const tkv_shape* shape, const tkv_codec_params* params, uint64_t namespace_id,
                     tkv_codec** out);
void tkv_codec_destroy(tkv_codec* codec);

// Bytes of one raw block [num_layers][2][block_tokens][num_kv_heads][head_dim] in the dtype.
size_t tkv_codec_raw_bytes(const tkv_codec* codec);
// Bytes of one packed block (header, sections and checksum); fixed for a codec.
size_t tkv_codec_packed_bytes(const tkv_codec* codec);
// packed_bytes * 8 / (K and V values of one block).
double tkv_codec_bits_per_value(const tkv_codec* codec);

// raw: raw_bytes bytes; packed: packed_bytes bytes.
int tkv_codec_encode(const tkv_codec* codec, const void* raw, size_t raw_len, void* packed,
                     size_t packed_len);
// Decodes layers [layer_begin, layer_end) (layer_end -1 = to the last) of a packed block of
// this codec into out: [layers][2][block_tokens][num_kv_heads][head_dim] of out_dtype.
// verify_checksum != 0 checks the trailing xxHash3 first (DataLoss on mismatch).
int tkv_codec_decode(const tkv_codec* codec, const void* packed, size_t packed_len,
                     int32_t out_dtype, int32_t layer_begin, int32_t layer_end, void* out,
                     size_t out_len, int32_t verify_checksum);

// ---- Decode into GPU memory (a serving engine's own device) ----------------------------------
// The CUDA backend (turbokv/codec/cuda_codec.h): packed bytes as GetBlocks(PACKED) returns them,
// in host memory, decoded on the device straight into device memory, so only the packed bytes
// cross PCIe. Values are identical to tkv_codec_decode's.

// 0 when this library has the CUDA backend and CUDA device `device` can be used; else
// Unavailable (14; built without CUDA, no device or driver) or InvalidArgument (3; no such
// device), with tkv_last_error() saying why.
int tkv_cuda_available(int32_t device);

// Decodes n packed blocks (packed[i]: packed_len[i] bytes of host memory, blocks of `codec`)
// into out_device on CUDA device `device`: [n][layers][2][block_tokens][num_kv_heads][head_dim]
// of out_dtype for layers [layer_begin, layer_end) (-1 = to the last), out_len bytes, 16-byte
// aligned device memory. The work is queued on `stream` (a cudaStream_t of that device; NULL:
// the legacy default stream) after what is queued there already; the call returns once the
// values are in place. verify_checksum != 0 checks each block's xxHash3 first.
// block_codes (NULL or n entries) receives each block's status code; a failed block is left as
// zeros. Returns 0 when every block decoded; else the first failing block's code with its
// message (naming the block) in tkv_last_error(); a device failure returns Internal (13) or
// Unavailable (14) for the whole call. The device codec is created on first use per device and
// kept for the life of the process.
int tkv_cuda_decode_to_device(const tkv_codec* codec, int32_t device, const void* const* packed,
                              const size_t* packed_len, size_t n, int32_t out_dtype,
                              int32_t layer_begin, int32_t layer_end, void* out_device,
                              size_t out_len, void* stream, int32_t verify_checksum,
                              int32_t* block_codes);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // TURBOKV_CODEC_C_API_H_
