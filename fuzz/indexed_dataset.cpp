// Fuzz target: the Megatron MMIDIDX reader (data/indexed_dataset.h).
//
// Input: a 2-byte little-endian length L, then L bytes of .bin (fewer when the input is shorter),
// then the .idx. Both are written to a scratch prefix and opened with IndexedDataset. The files are
// memory-mapped, where AddressSanitizer sees no bounds, so every value the reader hands out is checked
// against the harness's own (heap) copy of the bytes: lengths and offsets against the .idx layout,
// tokens against the .bin. Out-of-range requests must be rejected with an Error.
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "fuzz_util.h"

using namespace megadlm;

namespace {

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Token `k` of a .bin that starts at byte `ptr`, as the reader should convert it (or -1 when it
// does not fit a non-negative int32, which the reader must reject).
int64_t expected_token(const std::vector<uint8_t>& bin, IndexDType t, uint64_t ptr, uint64_t k) {
  const uint64_t item = index_dtype_size(t);
  const uint64_t at = ptr + k * item;
  FUZZ_REQUIRE(at + item <= bin.size(), "token lies inside the .bin");
  const uint8_t* p = bin.data() + at;
  int64_t v = 0;
  switch (t) {
    case IndexDType::U8: v = *p; break;
    case IndexDType::I8: v = static_cast<int8_t>(*p); break;
    case IndexDType::I16: v = load<int16_t>(p); break;
    case IndexDType::U16: v = load<uint16_t>(p); break;
    case IndexDType::I32: v = load<int32_t>(p); break;
    case IndexDType::I64: v = load<int64_t>(p); break;
    default: FUZZ_REQUIRE(false, "a float dtype was accepted");
  }
  return v >= 0 && v <= INT32_MAX ? v : -1;
}

template <typename F>
bool throws_error(F&& f) {
  try {
    f();
  } catch (const Error&) {
    return true;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t bin_len = std::min<size_t>(load<uint16_t>(data), size - 2);
  const std::vector<uint8_t> bin(data + 2, data + 2 + bin_len);
  const std::vector<uint8_t> idx(data + 2 + bin_len, data + size);
  fuzz::write_scratch("d.bin", bin.data(), bin.size());
  fuzz::write_scratch("d.idx", idx.data(), idx.size());

  std::unique_ptr<IndexedDataset> ds;
  try {
    ds = std::make_unique<IndexedDataset>(fuzz::scratch_dir() + "/d");
  } catch (const Error&) {
    return 0;
  }
  // Accepted: the header and every array must be where the layout says.
  const int64_t S = ds->num_sequences(), D = ds->num_documents() + 1;
  FUZZ_REQUIRE(S >= 0 && D >= 1, "counts");
  FUZZ_REQUIRE(idx.size() >= 34 + 12 * static_cast<uint64_t>(S) + 8 * static_cast<uint64_t>(D), "arrays inside the .idx");
  FUZZ_REQUIRE(static_cast<uint8_t>(ds->dtype()) == idx[17], "dtype code");
  const uint64_t lengths_at = 34, pointers_at = 34 + 4 * static_cast<uint64_t>(S),
                 docs_at = pointers_at + 8 * static_cast<uint64_t>(S);
  int64_t prev = 0;
  for (int64_t j = 0; j < D; ++j) {
    const int64_t v = ds->document_index(j);
    FUZZ_REQUIRE(v == load<int64_t>(idx.data() + docs_at + 8 * j), "document index value");
    FUZZ_REQUIRE(v >= prev && v <= S, "document index is monotone and within [0, S]");
    prev = v;
  }
  FUZZ_REQUIRE(throws_error([&] { ds->document_index(D); }), "document index past the end is an Error");
  FUZZ_REQUIRE(throws_error([&] { ds->sequence_length(S); }), "sequence past the end is an Error");

  const uint64_t item = index_dtype_size(ds->dtype());
  int64_t total = 0;
  std::vector<int32_t> out;
  for (int64_t i = 0; i < S; ++i) {
    const int32_t len = ds->sequence_length(i);
    const int64_t ptr = ds->sequence_pointer(i);
    FUZZ_REQUIRE(len == load<int32_t>(idx.data() + lengths_at + 4 * i), "sequence length value");
    FUZZ_REQUIRE(ptr == load<int64_t>(idx.data() + pointers_at + 8 * i), "sequence pointer value");
    FUZZ_REQUIRE(len >= 0 && ptr >= 0, "accepted lengths and offsets are non-negative");
    FUZZ_REQUIRE(static_cast<uint64_t>(ptr) + static_cast<uint64_t>(len) * item <= bin.size(),
                 "an accepted sequence lies inside the .bin");
    total += len;
    // The whole sequence, then a window chosen by the sequence's own bytes; values must match the .bin.
    bool fits = true;
    for (int64_t k = 0; k < len; ++k) fits &= expected_token(bin, ds->dtype(), ptr, k) >= 0;
    bool got = true;
    try {
      out = ds->get(i);
    } catch (const Error&) {
      got = false;
    }
    FUZZ_REQUIRE(got == fits, "get() succeeds exactly when every token fits int32");
    if (got) {
      FUZZ_REQUIRE(out.size() == static_cast<size_t>(len), "get() size");
      for (int64_t k = 0; k < len; ++k)
        FUZZ_REQUIRE(out[k] == expected_token(bin, ds->dtype(), ptr, k), "get() token value");
    }
    int32_t one = 0;
    FUZZ_REQUIRE(throws_error([&] { ds->read(i, len, 1, &one); }), "reading past a sequence is an Error");
    FUZZ_REQUIRE(throws_error([&] { ds->read(i, -1, 1, &one); }), "a negative offset is an Error");
  }
  FUZZ_REQUIRE(total == ds->total_tokens(), "total_tokens is the sum of the lengths");
  return 0;
}
