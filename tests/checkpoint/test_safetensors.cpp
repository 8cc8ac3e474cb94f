// safetensors reader and writer: round trips, a file written by the reference Python package, every
// kind of lying or broken file (each must give megadlm::Error naming the file), and the atomic writer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/dtype.h"
#include "core/error.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

using test::TempDir;
using test::entries_of;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// An 8-byte little-endian length (declared_len, or the header's real length) + header + data.
std::string raw_file(const std::string& header, const std::string& data, int64_t declared_len = -1) {
  const uint64_t n = declared_len >= 0 ? static_cast<uint64_t>(declared_len) : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

// Runs f, expects megadlm::Error whose message names `path` and contains `what`.
void expect_error(const std::function<void()>& f, const std::string& path, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "no error for " << path << " (expected one about '" << what << "')";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << "message does not name the file: " << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << "message lacks '" << what << "': " << msg;
  }
}

void expect_load_error(const std::string& path, const std::string& what) {
  expect_error([&] { SafetensorsFile f(path); }, path, what);
}

Tensor make_tensor(const Shape& shape, DType dt, uint64_t seed) {
  Tensor t = Tensor::empty(shape, dt);
  // Fill the bytes with a reproducible pattern (every dtype round-trips bytes, not values).
  const std::vector<float> r = test::random_vector(static_cast<int64_t>(t.nbytes()) + 1, seed, 0.0f, 256.0f);
  auto* b = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) b[i] = static_cast<unsigned char>(static_cast<int>(r[i]) & 0xff);
  return t;
}

std::string fixture_path() { return std::string(MEGADLM_SOURCE_DIR) + "/tests/checkpoint/fixtures/small.safetensors"; }

}  // namespace

// ---- round trip ----------------------------------------------------------------------------------------

TEST(Safetensors, RoundTripOfDtypesShapesAndMetadata) {
  TempDir dir;
  const std::string path = dir / "rt.safetensors";
  std::vector<SafetensorsEntry> in = {
      {"a.f32", make_tensor({3, 5}, DType::F32, 1)},
      {"b.bf16", make_tensor({7}, DType::BF16, 2)},       // odd byte count: later offsets unaligned
      {"c.i32", make_tensor({2, 1, 3}, DType::I32, 3)},
      {"d.scalar", make_tensor({}, DType::F32, 4)},       // 0-d
      {"e.empty", make_tensor({0, 4}, DType::F32, 5)},    // no bytes
      {"f.f16", make_tensor({2, 2}, DType::F16, 6)},
      {"g.u8", make_tensor({1, 1, 1, 1, 1, 3}, DType::U8, 7)},  // six dimensions
      {"h.i64", make_tensor({2}, DType::I64, 8)},
  };
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "round trip \"quoted\""}};
  write_safetensors(path, in, meta);
  EXPECT_EQ(entries_of(fs::path(path).parent_path().string()), std::set<std::string>{"rt.safetensors"});

  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata(), meta);
  std::vector<std::string> names = f.names();
  ASSERT_EQ(names.size(), in.size());
  for (const auto& e : in) {
    ASSERT_TRUE(f.has(e.name)) << e.name;
    const Tensor t = f.get(e.name);
    EXPECT_EQ(t.dtype(), e.tensor.dtype()) << e.name;
    EXPECT_EQ(t.shape(), e.tensor.shape()) << e.name << " " << t.shape().str();
    EXPECT_EQ(t.dim(), e.tensor.dim()) << e.name;
    ASSERT_EQ(t.nbytes(), e.tensor.nbytes());
    if (t.nbytes()) {
      EXPECT_EQ(std::memcmp(t.raw(), e.tensor.raw(), t.nbytes()), 0) << e.name;
    }
  }
  EXPECT_FALSE(f.has("missing"));
  expect_error([&] { f.get("missing"); }, path, "missing");

  // The data buffer starts 8-byte aligned, as the format recommends.
  const std::string bytes = read_file(path);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; --i) hl = (hl << 8) | static_cast<unsigned char>(bytes[static_cast<size_t>(i)]);
  EXPECT_EQ((8 + hl) % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + hl + 15 * 4 + 7 * 2 + 6 * 4 + 4 + 0 + 4 * 2 + 3 + 2 * 8);
}

TEST(Safetensors, ReadIntoConvertsNarrowFloatsToF32) {
  TempDir dir;
  const std::string path = dir / "narrow.safetensors";
  const std::vector<float> v = test::random_vector(13, 21, -100.0f, 100.0f);
  Tensor bf = Tensor::empty({13}, DType::BF16), hf = Tensor::empty({13}, DType::F16);
  Tensor i32 = Tensor::empty({13}, DType::I32);
  for (int i = 0; i < 13; ++i) {
    bf.data<uint16_t>()[i] = f32_to_bf16(v[static_cast<size_t>(i)]);
    hf.data<uint16_t>()[i] = f32_to_f16(v[static_cast<size_t>(i)]);
    i32.data<int32_t>()[i] = i;
  }
  write_safetensors(path, {{"bf", bf}, {"hf", hf}, {"i", i32}});
  SafetensorsFile f(path);
  Tensor out = Tensor::empty({13}, DType::F32);
  f.read_into("bf", out);
  for (int i = 0; i < 13; ++i) {
    EXPECT_EQ(out.data<float>()[i], bf16_to_f32(f32_to_bf16(v[static_cast<size_t>(i)])));
    EXPECT_NEAR(out.data<float>()[i], v[static_cast<size_t>(i)], 1.0);  // bf16 keeps ~3 digits
  }
  f.read_into("hf", out);
  for (int i = 0; i < 13; ++i) {
    EXPECT_EQ(out.data<float>()[i], f16_to_f32(f32_to_f16(v[static_cast<size_t>(i)])));
    EXPECT_NEAR(out.data<float>()[i], v[static_cast<size_t>(i)], 0.05);
  }
  // Same dtype copies; a different shape with the same count is accepted (views are the caller's job).
  Tensor same = Tensor::empty({13}, DType::BF16);
  f.read_into("bf", same);
  EXPECT_EQ(std::memcmp(same.raw(), bf.raw(), 26), 0);
  // Wrong element count, and conversions that do not exist, name the file and the tensor.
  Tensor wrong = Tensor::empty({12}, DType::F32);
  expect_error([&] { f.read_into("bf", wrong); }, path, "'bf'");
  expect_error([&] { f.read_into("i", out); }, path, "'i'");
  Tensor to_half = Tensor::empty({13}, DType::F16);
  expect_error([&] { f.read_into("bf", to_half); }, path, "'bf'");
}

// ---- a file written by Python's safetensors package ------------------------------------------------------

TEST(SafetensorsFixture, FileFromReferencePackageLoads) {
  // tools/reference/make_safetensors_fixture.py (safetensors 0.8.0, torch) wrote this file; the values
  // below are the ones that script prints.
  const std::string path = fixture_path();
  ASSERT_TRUE(fs::exists(path)) << path;
  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"producer", "make_safetensors_fixture.py"},
                                                               {"purpose", "reader test"}}));
  EXPECT_EQ(f.names().size(), 8u);

  Tensor t = f.get("f32_matrix");
  ASSERT_EQ(t.dtype(), DType::F32);
  ASSERT_EQ(t.shape(), Shape({2, 3}));
  const float f32_expected[6] = {0.5f, -1.25f, 3.0f, 0.1f, -0.0f, 1024.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<float>()[i], f32_expected[i]) << i;
  EXPECT_TRUE(std::signbit(t.data<float>()[4]));

  t = f.get("bf16_vector");
  ASSERT_EQ(t.dtype(), DType::BF16);
  ASSERT_EQ(t.shape(), Shape({5}));
  const uint16_t bf_bits[5] = {0x3f80, 0xc020, 0x3eab, 0x4049, 0x3dcd};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(t.data<uint16_t>()[i], bf_bits[i]) << i;
  Tensor conv = Tensor::empty({5}, DType::F32);
  f.read_into("bf16_vector", conv);
  const float bf_values[5] = {1.0f, -2.5f, 0.333984375f, 3.140625f, 0.10009765625f};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(conv.data<float>()[i], bf_values[i]) << i;

  t = f.get("f16_matrix");
  ASSERT_EQ(t.dtype(), DType::F16);
  ASSERT_EQ(t.shape(), Shape({2, 2}));
  const uint16_t hf_bits[4] = {0x7bff, 0x0400, 0x3555, 0xae66};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.data<uint16_t>()[i], hf_bits[i]) << i;
  conv = Tensor::empty({2, 2}, DType::F32);
  f.read_into("f16_matrix", conv);
  const float hf_values[4] = {65504.0f, 6.103515625e-05f, 0.333251953125f, -0.0999755859375f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(conv.data<float>()[i], hf_values[i]) << i;

  t = f.get("i32_vector");
  ASSERT_EQ(t.dtype(), DType::I32);
  const int32_t i32_expected[4] = {0, -1, 2147483647, INT32_MIN};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.data<int32_t>()[i], i32_expected[i]) << i;

  t = f.get("i64_vector");
  ASSERT_EQ(t.dtype(), DType::I64);
  const int64_t i64_expected[3] = {7, -3, int64_t{1} << 40};
  for (int i = 0; i < 3; ++i) EXPECT_EQ(t.data<int64_t>()[i], i64_expected[i]) << i;

  t = f.get("u8_cube");
  ASSERT_EQ(t.dtype(), DType::U8);
  ASSERT_EQ(t.shape(), Shape({2, 2, 2}));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(t.data<uint8_t>()[i], 31 * i) << i;

  t = f.get("scalar");
  EXPECT_EQ(t.dim(), 0);
  EXPECT_EQ(t.numel(), 1);
  EXPECT_EQ(t.data<float>()[0], -7.75f);

  t = f.get("empty");
  EXPECT_EQ(t.shape(), Shape({0, 3}));
  EXPECT_EQ(t.numel(), 0);
}

// ---- corrupt files: each an Error naming the file ------------------------------------------------------

TEST(SafetensorsCorrupt, TruncatedBelowHeaderLength) {
  TempDir dir;
  const std::string p = dir / "short.safetensors";
  write_bytes(p, std::string("\x05\x00\x00", 3));
  expect_load_error(p, "truncated");
  write_bytes(p, "");
  expect_load_error(p, "truncated");
}

TEST(SafetensorsCorrupt, HeaderLengthBeyondTheFile) {
  TempDir dir;
  const std::string p = dir / "long_header.safetensors";
  write_bytes(p, raw_file("{}", "", 1000));
  expect_load_error(p, "header length 1000");
  // A length so large that 8 + length overflows must not wrap around.
  write_bytes(p, raw_file("{}", "", -1) .replace(0, 8, std::string(8, '\xff')));
  expect_load_error(p, "runs past the end");
}

TEST(SafetensorsCorrupt, InvalidJsonHeader) {
  TempDir dir;
  const std::string p = dir / "bad_json.safetensors";
  write_bytes(p, raw_file("{\"a\": {\"dtype\": \"F32\",", std::string(16, '\0')));
  expect_load_error(p, "not valid JSON");
  write_bytes(p, raw_file("[1, 2, 3]", ""));
  expect_load_error(p, "not a JSON object");
}

TEST(SafetensorsCorrupt, OffsetsOutOfRange) {
  TempDir dir;
  const std::string p = dir / "offsets.safetensors";
  write_bytes(p, raw_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(4, '\0')));
  expect_load_error(p, "outside the data buffer");
  write_bytes(p, raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", std::string(8, '\0')));
  expect_load_error(p, "outside the data buffer");  // begin after end
  write_bytes(p, raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", std::string(8, '\0')));
  expect_load_error(p, "malformed data_offsets");
  write_bytes(p, raw_file(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", std::string(8, '\0')));
  expect_load_error(p, "malformed data_offsets");
}

TEST(SafetensorsCorrupt, OverlappingRanges) {
  TempDir dir;
  const std::string p = dir / "overlap.safetensors";
  write_bytes(p, raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          std::string(12, '\0')));
  expect_load_error(p, "overlap");
}

TEST(SafetensorsCorrupt, SizeNotMatchingShapeTimesDtype) {
  TempDir dir;
  const std::string p = dir / "size.safetensors";
  write_bytes(p, raw_file(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(12, '\0')));
  expect_load_error(p, "'x' has 8 bytes but its shape and dtype need 12");
  write_bytes(p, raw_file(R"({"x":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]}})", std::string(16, '\0')));
  expect_load_error(p, "need 8");
  // Dimensions whose product overflows 64 bits must be caught, not wrap to a small size.
  write_bytes(p, raw_file(R"({"x":{"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""));
  expect_load_error(p, "'x'");
  write_bytes(p, raw_file(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0')));
  expect_load_error(p, "negative");
}

TEST(SafetensorsCorrupt, UnknownDtype) {
  TempDir dir;
  const std::string p = dir / "dtype.safetensors";
  write_bytes(p, raw_file(R"({"x":{"dtype":"Q7","shape":[2],"data_offsets":[0,2]}})", std::string(2, '\0')));
  expect_load_error(p, "'Q7'");
}

TEST(SafetensorsCorrupt, MissingFields) {
  TempDir dir;
  const std::string p = dir / "fields.safetensors";
  write_bytes(p, raw_file(R"({"x":{"dtype":"F32","shape":[2]}})", std::string(8, '\0')));
  expect_load_error(p, "'x' lacks dtype, shape or data_offsets");
  write_bytes(p, raw_file(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')));
  expect_load_error(p, "lacks");
  write_bytes(p, raw_file(R"({"x":"F32"})", ""));
  expect_load_error(p, "lacks");
}

TEST(SafetensorsCorrupt, TruncatedData) {
  // A valid file cut short: the data buffer no longer holds the last tensor.
  TempDir dir;
  const std::string p = dir / "cut.safetensors";
  write_safetensors(p, {{"a", make_tensor({4, 4}, DType::F32, 1)}, {"b", make_tensor({4}, DType::F32, 2)}});
  { SafetensorsFile ok(p); }
  fs::resize_file(p, fs::file_size(p) - 3);
  expect_load_error(p, "'b'");
}

TEST(SafetensorsCorrupt, MissingFile) {
  TempDir dir;
  expect_load_error(dir / "nope.safetensors", "cannot open");
}

// ---- atomic writes --------------------------------------------------------------------------------------

TEST(SafetensorsWrite, AtomicWriterLeavesNoTempAndFailuresKeepThePreviousFile) {
  TempDir dir;
  const std::string path = dir / "model.safetensors";
  const Tensor first = make_tensor({16}, DType::F32, 1), second = make_tensor({32}, DType::F32, 2);
  write_safetensors(path, {{"w", first}});
  EXPECT_EQ(entries_of(dir.str()), std::set<std::string>{"model.safetensors"});  // no temporary left
  const std::string before = read_file(path);

  // A failure at the final rename (the target is a non-empty directory): Error naming the path, the
  // temporary file removed, the directory untouched.
  const std::string blocked = dir / "blocked.safetensors";
  fs::create_directories(blocked + "/inside");
  expect_error([&] { write_safetensors(blocked, {{"w", second}}); }, blocked, "cannot rename");
  EXPECT_EQ(entries_of(dir.str()), (std::set<std::string>{"blocked.safetensors", "model.safetensors"}));
  EXPECT_TRUE(fs::is_directory(blocked + "/inside"));
  EXPECT_EQ(read_file(path), before);

  // Into a directory that does not exist: Error naming the path, nothing created.
  const std::string nowhere = dir / "no/such/dir/model.safetensors";
  expect_error([&] { write_safetensors(nowhere, {{"w", second}}); }, nowhere, "cannot create");
  EXPECT_FALSE(fs::exists(dir / "no"));

  // A successful overwrite replaces the content and leaves no temp file.
  write_safetensors(path, {{"w", second}});
  EXPECT_EQ(entries_of(dir.str()), (std::set<std::string>{"blocked.safetensors", "model.safetensors"}));
  SafetensorsFile f(path);
  EXPECT_EQ(f.get("w").numel(), 32);
  EXPECT_EQ(std::memcmp(f.get("w").raw(), second.raw(), 128), 0);

  // write_file_atomic and read_file.
  write_file_atomic(dir / "side.json", "{\"a\": 1}\n");
  EXPECT_EQ(read_file(dir / "side.json"), "{\"a\": 1}\n");
  EXPECT_EQ(entries_of(dir.str()), (std::set<std::string>{"blocked.safetensors", "model.safetensors", "side.json"}));
  expect_error([&] { read_file(dir / "absent.json"); }, dir / "absent.json", "cannot open");
}

TEST(SafetensorsWrite, DtypeNames) {
  EXPECT_STREQ(safetensors_dtype_name(DType::BF16), "BF16");
  EXPECT_STREQ(safetensors_dtype_name(DType::F8E4M3), "F8_E4M3");
  EXPECT_EQ(safetensors_dtype_from_name("F8_E5M2", "f"), DType::F8E5M2);
  EXPECT_EQ(safetensors_dtype_from_name("I64", "f"), DType::I64);
  expect_error([] { safetensors_dtype_from_name("F64", "some/file.safetensors"); }, "some/file.safetensors", "F64");
}
