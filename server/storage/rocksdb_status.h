// rocksdb::Status -> absl::Status, the one place the conversion happens.
// Internal to server/storage.
#ifndef TURBOKV_SERVER_STORAGE_ROCKSDB_STATUS_H_
#define TURBOKV_SERVER_STORAGE_ROCKSDB_STATUS_H_

#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "rocksdb/status.h"

namespace turbokv::server {

inline absl::Status FromRocksDb(const rocksdb::Status& s, std::string_view what) {
  if (s.ok()) return absl::OkStatus();
  std::string msg = absl::StrCat(std::string(what), ": rocksdb: ", s.ToString());
  switch (s.code()) {
    case rocksdb::Status::kNotFound:
      return absl::NotFoundError(msg);
    case rocksdb::Status::kCorruption:
      return absl::DataLossError(msg);
    case rocksdb::Status::kInvalidArgument:
    case rocksdb::Status::kNotSupported:
      return absl::InternalError(msg);  // our bug, not the caller's
    case rocksdb::Status::kIOError:
      if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
      return absl::UnavailableError(msg);
    case rocksdb::Status::kBusy:
    case rocksdb::Status::kTimedOut:
    case rocksdb::Status::kTryAgain:
    case rocksdb::Status::kIncomplete:
    case rocksdb::Status::kShutdownInProgress:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_STORAGE_ROCKSDB_STATUS_H_
