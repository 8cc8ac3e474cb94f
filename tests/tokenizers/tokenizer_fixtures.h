#pragma once
// The tokenizer tests' fixtures (tests/tokenizers/fixtures/, made by tools/reference/*.py).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace megadlm::test {

inline std::string tokenizer_fixture(const std::string& name) {
  return std::string(MEGADLM_SOURCE_DIR) + "/tests/tokenizers/fixtures/" + name;
}

// The JSON objects of a .jsonl file, blank lines skipped; a file that cannot be opened fails the test.
inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(f, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace megadlm::test
