#pragma once
// What the HuggingFace conversion tests of the families (BERT, T5) share: the fixtures' paths, the
// bit-for-bit comparison of two HF directories (tensors, config keys) and of two models' parameters, a
// fixture's round trip through convert_checkpoint, a fixture copy with an edited config.json, and the
// check of an Error's message.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../robustness/child_process.h"
#include "checkpoint/safetensors_sharded.h"
#include "core/file_io.h"
#include "core/parameters.h"
#include "test_util.h"

namespace megadlm::test {

inline std::string hf_fixture(const std::string& name) {
  return std::string(MEGADLM_SOURCE_DIR) + "/tests/checkpoint/fixtures/" + name;
}

// Every tensor of HF directory `a` equals (bytes, dtype, shape) the one of the same name in `b`, and
// they hold the same names.
inline void expect_same_tensors(const std::string& a, const std::string& b) {
  ShardedSafetensors x(a), y(b);
  ASSERT_EQ(x.names(), y.names());
  for (const auto& n : x.names()) {
    const Tensor s = x.get(n), t = y.get(n);
    ASSERT_EQ(s.dtype(), t.dtype()) << n;
    ASSERT_EQ(s.shape(), t.shape()) << n;
    EXPECT_EQ(0, std::memcmp(s.raw(), t.raw(), s.nbytes())) << n << " differs after the round trip";
  }
}

inline nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(read_file(path)); }
inline void write_json(const std::string& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(2); }

// A copy of fixture `name` in tmp/name (replacing an earlier one) with config.json changed by `edit`.
inline std::string edited_copy(const TempDir& tmp, const std::string& name,
                               const std::function<void(nlohmann::json&)>& edit) {
  const std::string d = tmp / name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  std::filesystem::copy_file(hf_fixture(name) + "/model.safetensors", d + "/model.safetensors");
  nlohmann::json j = read_json(hf_fixture(name) + "/config.json");
  edit(j);
  write_json(d + "/config.json", j);
  return d;
}

// config.json of HF directories a and b agree on `keys`.
inline void expect_same_config(const std::string& a, const std::string& b, std::initializer_list<const char*> keys) {
  const nlohmann::json x = read_json(a + "/config.json"), y = read_json(b + "/config.json");
  for (const char* k : keys) EXPECT_EQ(x[k], y[k]) << a << " vs " << b << ": " << k;
}

// Two models' parameters: the same count, bit for bit.
inline void expect_same_params(const ParamStore& a, const ParamStore& b) {
  ASSERT_EQ(a.numel(), b.numel());
  EXPECT_EQ(0, std::memcmp(a.values(), b.values(), sizeof(float) * static_cast<size_t>(a.numel())));
}

// Fixture `name` through convert_checkpoint: HF -> native tmp/name_native -> HF tmp/name_hf (with
// export_args added); both runs must succeed. Returns {native, hf}.
inline std::pair<std::string, std::string> convert_through_native(const TempDir& tmp, const std::string& name,
                                                                 std::vector<std::string> export_args = {}) {
  const std::string native = tmp / (name + "_native"), out = tmp / (name + "_hf");
  auto r = run_binary("convert_checkpoint", {"--from-hf", hf_fixture(name), "--to-native", native}, tmp / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.output;
  std::vector<std::string> args = {"--from-native", native, "--to-hf", out};
  args.insert(args.end(), export_args.begin(), export_args.end());
  r = run_binary("convert_checkpoint", args, tmp / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.output;
  return {native, out};
}

inline void expect_error_with(const std::function<void()>& f, const std::string& part) {
  const std::string msg = error_of(f);
  ASSERT_FALSE(msg.empty()) << "no Error (expected one with '" << part << "')";
  EXPECT_NE(msg.find(part), std::string::npos) << msg;
}

}  // namespace megadlm::test
