// Fuzz target: the safetensors reader (checkpoint/safetensors.h).
//
// Input: the whole file. It is written to a scratch path and opened with SafetensorsFile; every tensor
// of an accepted file is read with get() and read_into() (converting BF16/F16 to F32). The file is
// memory-mapped, where AddressSanitizer sees no bounds, so the harness re-reads the header itself and
// checks that each tensor the reader hands out has exactly the bytes its data_offsets name.
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "fuzz_util.h"

using namespace megadlm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch("model.safetensors", data, size);
  std::unique_ptr<SafetensorsFile> f;
  try {
    f = std::make_unique<SafetensorsFile>(path);
  } catch (const Error&) {
    return 0;
  }
  // Accepted: the header length and JSON must be what the reader saw.
  FUZZ_REQUIRE(size >= 8, "an accepted file has a header length");
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  FUZZ_REQUIRE(header_len <= size - 8, "the header lies inside the file");
  const uint8_t* buffer = data + 8 + header_len;
  const uint64_t buffer_size = size - 8 - header_len;
  const nlohmann::json header = nlohmann::json::parse(data + 8, buffer);  // the reader parsed it already
  uint64_t total = 0;
  for (const std::string& name : f->names()) {
    FUZZ_REQUIRE(name != "__metadata__" && header.contains(name), "every tensor is in the header");
    const auto& off = header[name]["data_offsets"];
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    FUZZ_REQUIRE(begin <= end && end <= buffer_size, "data_offsets inside the buffer");
    const Tensor t = f->get(name);
    FUZZ_REQUIRE(t.nbytes() == end - begin, "the tensor has the bytes of its data_offsets");
    FUZZ_REQUIRE(t.nbytes() == 0 || std::memcmp(t.raw(), buffer + begin, t.nbytes()) == 0,
                 "the view shows the bytes of its data_offsets");
    total += t.nbytes();
    // A copy in the same dtype, and a conversion to F32 where the reader offers one.
    Tensor same = Tensor::empty(t.shape(), t.dtype());
    f->read_into(name, same);
    FUZZ_REQUIRE(same.nbytes() == 0 || std::memcmp(same.raw(), buffer + begin, same.nbytes()) == 0, "read_into copies");
    if (t.dtype() == DType::BF16 || t.dtype() == DType::F16) {
      Tensor f32 = Tensor::empty(t.shape(), DType::F32);
      f->read_into(name, f32);
    }
  }
  FUZZ_REQUIRE(total <= buffer_size, "tensors do not overlap");
  for (const auto& [k, v] : f->metadata()) FUZZ_REQUIRE(header["__metadata__"].contains(k), "metadata key");
  return 0;
}
