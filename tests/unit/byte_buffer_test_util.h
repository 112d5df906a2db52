// A helper of the wire-format unit tests (client and server): a grpc::ByteBuffer's bytes in
// one string, to compare with protobuf's own serialization.
#ifndef TURBOKV_TESTS_UNIT_BYTE_BUFFER_TEST_UTIL_H_
#define TURBOKV_TESTS_UNIT_BYTE_BUFFER_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"

namespace turbokv::testing {

// The concatenation of b's slices (a failed Dump fails the calling test).
inline std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

}  // namespace turbokv::testing

#endif  // TURBOKV_TESTS_UNIT_BYTE_BUFFER_TEST_UTIL_H_
