// unicode::replace_invalid_utf8 against Python's bytes.decode('utf-8', 'replace') on hand-picked and
// random byte strings (fixture written by tools/reference/make_utf8_replace_fixture.py).
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizers/unicode.h"

namespace megadlm {
namespace {

std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string to_hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

TEST(Utf8Replace, MatchesPythonDecodeWithReplace) {
  const std::string path = std::string(MEGADLM_SOURCE_DIR) + "/tests/tokenizers/fixtures/utf8_replace_expected.jsonl";
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << path;
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::string bytes = from_hex(j["bytes"].get<std::string>());
    const std::string got = unicode::replace_invalid_utf8(bytes);
    EXPECT_EQ(to_hex(got), j["expected"].get<std::string>()) << "input " << j["bytes"];
    EXPECT_TRUE(unicode::is_valid_utf8(got)) << "input " << j["bytes"];
    ++cases;
  }
  EXPECT_GT(cases, 400);
}

TEST(Utf8Replace, ResultAlwaysDumpsAsJson) {
  // nlohmann::json's strict dump throws on invalid UTF-8 (type_error 316); the replaced text never does.
  const std::string cut = std::string("ok \xE2\x82", 5);  // "€" cut after two of its three bytes
  EXPECT_THROW(nlohmann::json(cut).dump(), nlohmann::json::type_error);
  EXPECT_EQ(nlohmann::json(unicode::replace_invalid_utf8(cut)).dump(), "\"ok \xEF\xBF\xBD\"");
}

}  // namespace
}  // namespace megadlm
