// The CLI's .npy reader/writer: round trips, files written by numpy, and clear rejections.
#include <gtest/gtest.h>

#include <cstring>

#include "npy.h"

namespace turbokv::cli {
namespace {

std::string Header(absl::string_view dict, uint8_t major = 1) {
  std::string h = std::string(dict);
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + h.size() + 1) % 64 != 0) h.push_back(' ');
  h.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  out.push_back(static_cast<char>(h.size() & 0xff));
  out.push_back(static_cast<char>(h.size() >> 8));
  if (major != 1) out.append(2, '\0');
  return out + h;
}

TEST(NpyTest, RoundTripsEverySupportedDtype) {
  for (const char* descr : {"<f2", "<f4", "<f8", "<u2", "<i4", "<i8", "|u1"}) {
    NpyArray a;
    a.descr = descr;
    a.shape = {2, 3, 5};
    a.data.resize(30 * a.itemsize());
    for (size_t i = 0; i < a.data.size(); ++i) a.data[i] = static_cast<char>(i * 7);
    absl::StatusOr<std::string> bytes = SerializeNpy(a);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    // Data starts on a 64-byte boundary, as numpy writes it.
    EXPECT_EQ((bytes->size() - a.data.size()) % 64, 0u);
    absl::StatusOr<NpyArray> b = ParseNpy(*bytes);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->descr, a.descr);
    EXPECT_EQ(b->shape, a.shape);
    EXPECT_EQ(b->data, a.data);
  }
}

TEST(NpyTest, OneDimensionalScalarAndEmpty) {
  for (std::vector<uint64_t> shape :
       {std::vector<uint64_t>{4}, std::vector<uint64_t>{}, std::vector<uint64_t>{3, 0, 2}}) {
    NpyArray a;
    a.descr = "<i4";
    a.shape = shape;
    a.data.resize(a.num_elements() * 4);
    absl::StatusOr<std::string> bytes = SerializeNpy(a);
    ASSERT_TRUE(bytes.ok());
    absl::StatusOr<NpyArray> b = ParseNpy(*bytes);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->shape, shape);
  }
  NpyArray a;
  a.descr = "<i4";
  a.shape = {4};
  a.data.resize(16);
  // numpy writes a 1-tuple as "(4,)".
  EXPECT_NE(SerializeNpy(a)->find("'shape': (4,)"), std::string::npos);
}

TEST(NpyTest, ParsesNumpyStyleHeadersAndVersion2) {
  std::string f = Header("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }");
  f.append(8, '\0');
  absl::StatusOr<NpyArray> a = ParseNpy(f);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->shape, (std::vector<uint64_t>{2, 2}));
  // Key order and quoting vary between writers.
  std::string g = Header("{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"|u1\"}", 2);
  g.append(3, 'x');
  absl::StatusOr<NpyArray> b = ParseNpy(g);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->data, "xxx");
}

TEST(NpyTest, ReadsFilesWrittenByNumpy) {
  // tests/fixtures holds real captures written by numpy.save (tests/fixtures/README.md).
  absl::StatusOr<NpyArray> kv =
      ReadNpy(std::string(TURBOKV_SOURCE_DIR) + "/tests/fixtures/stories260k_kv_64_fp16.npy");
  if (!kv.ok() && kv.status().code() == absl::StatusCode::kNotFound) {
    GTEST_SKIP() << "fixture missing: " << kv.status();
  }
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(kv->descr, "<f2");
  EXPECT_EQ(kv->shape, (std::vector<uint64_t>{5, 2, 64, 4, 8}));
  absl::StatusOr<NpyArray> tok =
      ReadNpy(std::string(TURBOKV_SOURCE_DIR) + "/tests/fixtures/stories260k_tokens_64.npy");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->descr, "<i4");
  EXPECT_EQ(tok->shape, (std::vector<uint64_t>{64}));
  // Re-serializing gives numpy's exact bytes back (same header layout, same data).
  absl::StatusOr<std::string> again = SerializeNpy(*kv);
  ASSERT_TRUE(again.ok());
  absl::StatusOr<NpyArray> kv2 = ParseNpy(*again);
  ASSERT_TRUE(kv2.ok());
  EXPECT_EQ(kv2->data, kv->data);
}

void ExpectRejected(const std::string& file, absl::string_view needle) {
  absl::StatusOr<NpyArray> a = ParseNpy(file);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find(needle), absl::string_view::npos) << a.status();
}

TEST(NpyTest, RejectsWithClearErrors) {
  ExpectRejected("not an npy file", "magic");
  ExpectRejected(
      Header("{'descr': '<f2', 'fortran_order': True, 'shape': (2,), }") + std::string(4, '\0'),
      "Fortran");
  ExpectRejected(
      Header("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }") + std::string(4, '\0'),
      "big-endian");
  ExpectRejected(
      Header("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }") + std::string(8, '\0'),
      "unsupported .npy dtype '<c8'");
  ExpectRejected(
      Header("{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }") + std::string(6, '\0'),
      "needs 8 data bytes, file has 6");
  ExpectRejected(
      Header("{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }") + std::string(4, '\0'),
      "needs 2 data bytes, file has 4");
  ExpectRejected(Header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }"),
                 "structured");
  ExpectRejected(Header("{'descr': '<f2', 'shape': (1,), }") + std::string(2, '\0'), "lacks");
  ExpectRejected(Header("{'descr': '<f2', 'fortran_order': False, 'shape': (-1,), }"), "shape");
  std::string v9 = Header("{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }");
  v9[6] = 9;
  ExpectRejected(v9, "version 9");
  std::string truncated = Header("{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }");
  ExpectRejected(truncated.substr(0, 30), "truncated");
  // Huge shapes do not overflow into a small expected size.
  ExpectRejected(Header("{'descr': '<f8', 'fortran_order': False, "
                        "'shape': (4294967296, 4294967296, 16), }"),
                 "needs more than");
}

TEST(NpyTest, WriterRejectsInconsistentArrays) {
  NpyArray a;
  a.descr = "<f2";
  a.shape = {3};
  a.data = "abc";
  EXPECT_EQ(SerializeNpy(a).status().code(), absl::StatusCode::kInvalidArgument);
  a.descr = "<c8";
  EXPECT_EQ(SerializeNpy(a).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NpyTest, ReadMissingFileIsNotFound) {
  EXPECT_EQ(ReadNpy("/nonexistent/x.npy").status().code(), absl::StatusCode::kNotFound);
}

// A local ENOENT is NOT_FOUND naming the missing directory, not PERMISSION_DENIED.
TEST(NpyTest, WriteIntoMissingDirectoryIsNotFound) {
  NpyArray a;
  a.descr = "<f2";
  a.shape = {1};
  a.data = std::string(2, '\0');
  const absl::Status s = WriteNpy("/nonexistent/dir/o.npy", a);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("cannot write /nonexistent/dir/o.npy (directory /nonexistent/dir "
                             "does not exist)"),
            absl::string_view::npos)
      << s;
}

}  // namespace
}  // namespace turbokv::cli
