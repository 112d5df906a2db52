#include "server/service/get_blocks_reactor.h"

#include <algorithm>
#include <chrono>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace turbokv::server {
namespace {

// One fetch reads at most this many blocks / this many output bytes; the next fetch starts
// once fewer than kRefillBytes are queued for writing.
constexpr size_t kFetchBlocks = 32;
constexpr size_t kFetchBytes = size_t{32} << 20;
constexpr size_t kRefillBytes = size_t{8} << 20;

// Appends the messages carrying `bytes` (chunks of at most 1 MiB).
void AppendChunks(uint32_t index, const std::string& hash, v1::Encoding encoding, v1::DType dtype,
                  std::string_view bytes, std::vector<v1::GetBlocksResponse>* out) {
  for (size_t offset = 0; offset < bytes.size(); offset += kMaxResponseChunkBytes) {
    v1::GetBlocksResponse m;
    m.set_index(index);
    m.set_block_hash(hash);
    m.set_found(true);
    m.set_encoding(encoding);
    if (encoding == v1::ENCODING_RAW) m.set_dtype(dtype);
    m.set_block_bytes(bytes.size());
    m.set_offset(offset);
    m.set_data(std::string(bytes.substr(offset, kMaxResponseChunkBytes)));
    out->push_back(std::move(m));
  }
}

}  // namespace

GetBlocksReactor::GetBlocksReactor(ServiceContext* ctx, const v1::GetBlocksRequest* request)
    : ctx_(ctx), request_(request), scope_(ctx, RpcMethod::kGetBlocks) {
  absl::Status s = ctx_->shutting_down.load() ? ShuttingDown() : Prepare();
  if (!s.ok() || request_->block_hashes().empty()) {
    finished_ = true;
    Finish(scope_.Complete(s));
    return;
  }
  std::unique_lock<std::mutex> l(mu_);
  Pump(l);
}

absl::Status GetBlocksReactor::Prepare() {
  absl::StatusOr<std::shared_ptr<const Namespace>> ns =
      ctx_->registry->Get(request_->namespace_id());
  if (!ns.ok()) return ns.status();
  ns_ = *std::move(ns);
  for (int i = 0; i < request_->block_hashes_size(); ++i) {
    absl::Status s = ValidateBlockHash(request_->block_hashes(i));
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("block_hashes[", i, "]: ", s.message()));
    }
  }
  encoding_ = request_->encoding();
  if (encoding_ == v1::ENCODING_PACKED) return absl::OkStatus();
  if (encoding_ != v1::ENCODING_RAW) {
    return absl::InvalidArgumentError("encoding must be ENCODING_RAW or ENCODING_PACKED");
  }
  switch (request_->dtype()) {
    case v1::DTYPE_UNSPECIFIED:
      out_dtype_ = ns_->codec.shape().dtype;
      break;
    case v1::DTYPE_FP16:
    case v1::DTYPE_BF16:
    case v1::DTYPE_FP32:
      out_dtype_ = static_cast<codec::DType>(request_->dtype());
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("dtype ", static_cast<int>(request_->dtype()), " is not a known DType"));
  }
  const uint32_t layers = static_cast<uint32_t>(ns_->codec.shape().num_layers);
  const uint32_t end = request_->layer_end() == 0 ? layers : request_->layer_end();
  if (end > layers || request_->layer_begin() >= end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer range [", request_->layer_begin(), ", ", request_->layer_end(),
        ") is not within the namespace's ", layers, " layers (layer_end 0 = num_layers)"));
  }
  range_.begin = static_cast<int>(request_->layer_begin());
  range_.end = static_cast<int>(end);
  absl::StatusOr<size_t> bytes = ns_->codec.DecodedBytes(out_dtype_, range_);
  if (!bytes.ok()) return bytes.status();
  decoded_bytes_ = *bytes;
  return absl::OkStatus();
}

void GetBlocksReactor::Fetch() {
  const size_t total = static_cast<size_t>(request_->block_hashes_size());
  size_t begin;
  {
    std::lock_guard<std::mutex> l(mu_);
    begin = next_;
  }
  const size_t per_block = std::max<size_t>(
      1, encoding_ == v1::ENCODING_RAW ? decoded_bytes_ : ns_->codec.packed_bytes());
  const size_t count =
      std::min({total - begin, kFetchBlocks, std::max<size_t>(1, kFetchBytes / per_block)});
  std::vector<std::string_view> hashes;
  hashes.reserve(count);
  for (size_t i = begin; i < begin + count; ++i) hashes.push_back(request_->block_hashes(i));

  std::vector<v1::GetBlocksResponse> messages;
  absl::Status error;
  uint64_t found = 0;
  absl::StatusOr<std::vector<std::optional<std::string>>> values =
      ctx_->store->GetBlocks(ns_->id, hashes);
  if (!values.ok()) {
    error = values.status();
  } else {
    // RAW: decode every found block of the batch at once (one launch on the GPU backend).
    std::vector<std::string> decoded(count);
    if (encoding_ == v1::ENCODING_RAW) {
      std::vector<size_t> which;
      std::vector<absl::Span<const uint8_t>> packeds;
      std::vector<absl::Span<uint8_t>> outs;
      for (size_t j = 0; j < count; ++j) {
        const std::optional<std::string>& value = (*values)[j];
        if (!value.has_value()) continue;
        decoded[j].resize(decoded_bytes_);
        which.push_back(j);
        packeds.emplace_back(reinterpret_cast<const uint8_t*>(value->data()), value->size());
        outs.emplace_back(reinterpret_cast<uint8_t*>(decoded[j].data()), decoded[j].size());
      }
      const auto start = std::chrono::steady_clock::now();
      std::vector<absl::Status> statuses =
          DecodeBlocks(ctx_->backend, ns_->codec, packeds, out_dtype_, range_, outs);
      ctx_->metrics->RecordCodec(
          CodecOp::kDecode,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          which.size() * decoded_bytes_);
      for (size_t k = 0; k < which.size() && error.ok(); ++k) {
        if (!statuses[k].ok()) {
          error = absl::InternalError(absl::StrCat(
              "block ", begin + which[k],
              " passed its checksum but does not decode: ", std::string(statuses[k].message())));
        }
      }
    }
    for (size_t j = 0; j < count && error.ok(); ++j) {
      const auto index = static_cast<uint32_t>(begin + j);
      const std::string& hash = request_->block_hashes(index);
      const std::optional<std::string>& value = (*values)[j];
      if (!value.has_value()) {
        v1::GetBlocksResponse m;
        m.set_index(index);
        m.set_block_hash(hash);
        m.set_found(false);
        messages.push_back(std::move(m));
        continue;
      }
      ++found;
      if (encoding_ == v1::ENCODING_PACKED) {
        AppendChunks(index, hash, encoding_, v1::DTYPE_UNSPECIFIED, *value, &messages);
      } else {
        AppendChunks(index, hash, encoding_, static_cast<v1::DType>(out_dtype_), decoded[j],
                     &messages);
        std::string().swap(decoded[j]);
      }
    }
  }
  ctx_->metrics->RecordGetBlocks(found, count - found);

  std::unique_lock<std::mutex> l(mu_);
  next_ = begin + count;
  fetching_ = false;
  if (!error.ok() && error_.ok()) error_ = error;
  for (v1::GetBlocksResponse& m : messages) {
    queued_bytes_ += m.data().size();
    queue_.push_back(std::move(m));
  }
  Pump(l);
}

void GetBlocksReactor::Pump(std::unique_lock<std::mutex>& l) {
  const size_t total = static_cast<size_t>(request_->block_hashes_size());
  const bool stop = cancelled_ || !error_.ok();
  bool start_write = false;
  bool start_fetch = false;
  if (!stop && !writing_ && !queue_.empty()) {
    current_ = std::move(queue_.front());
    queue_.pop_front();
    queued_bytes_ -= current_.data().size();
    writing_ = true;
    start_write = true;
  }
  if (!stop && !fetching_ && next_ < total && queued_bytes_ < kRefillBytes) {
    fetching_ = true;
    start_fetch = true;
  }
  const bool done = !writing_ && !fetching_ && (stop || (queue_.empty() && next_ >= total));
  if (done && !finished_) {
    finished_ = true;
    const absl::Status status =
        !error_.ok() ? error_
                     : (cancelled_ ? absl::CancelledError("GetBlocks cancelled by the client")
                                   : absl::OkStatus());
    l.unlock();
    Finish(scope_.Complete(status));
    return;
  }
  l.unlock();
  if (start_fetch) ctx_->pool->Submit([this] { Fetch(); });
  if (start_write) StartWrite(&current_);
}

void GetBlocksReactor::OnWriteDone(bool ok) {
  std::unique_lock<std::mutex> l(mu_);
  writing_ = false;
  if (!ok) cancelled_ = true;
  Pump(l);
}

void GetBlocksReactor::OnCancel() {
  std::unique_lock<std::mutex> l(mu_);
  cancelled_ = true;
  Pump(l);
}

}  // namespace turbokv::server
