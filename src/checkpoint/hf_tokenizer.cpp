#include "checkpoint/hf_tokenizer.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/error.h"

namespace megadlm {

namespace fs = std::filesystem;

namespace {

const char* const kSideFiles[] = {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json"};

void copy_over(const std::string& src, const std::string& dst) {
  MEGADLM_CHECK(fs::exists(src), src, ": tokenizer file is missing");
  std::error_code ec;
  fs::copy_file(src, dst, fs::copy_options::overwrite_existing, ec);
  MEGADLM_CHECK(!ec, "cannot copy ", src, " to ", dst, ": ", ec.message());
}

}  // namespace

TokenizerSpec hf_tokenizer_spec(const std::string& hf_dir) {
  TokenizerSpec s;
  const std::string d = fs::absolute(hf_dir).lexically_normal().string();
  if (fs::exists(d + "/tokenizer.json")) {
    s.type = "HuggingFaceTokenizer";
    s.tokenizer_model = d + "/tokenizer.json";
  } else if (fs::exists(d + "/vocab.json") && fs::exists(d + "/merges.txt")) {
    s.type = "GPT2BPETokenizer";
    s.vocab_file = d + "/vocab.json";
    s.merge_file = d + "/merges.txt";
  } else if (fs::exists(d + "/tokenizer.model")) {
    s.type = "SentencePieceTokenizer";
    s.tokenizer_model = d + "/tokenizer.model";
  }
  return s;
}

TokenizerSpec import_hf_tokenizer(const std::string& hf_dir, const std::string& dst_dir) {
  TokenizerSpec s = hf_tokenizer_spec(hf_dir);
  if (s.type.empty()) return s;
  fs::create_directories(dst_dir);
  const std::string d = fs::absolute(dst_dir).lexically_normal().string();
  auto carry = [&](std::string& path) {
    if (path.empty()) return;
    const std::string dst = d + "/" + fs::path(path).filename().string();
    copy_over(path, dst);
    path = dst;
  };
  carry(s.tokenizer_model);
  carry(s.vocab_file);
  carry(s.merge_file);
  for (const char* f : kSideFiles)
    if (fs::exists(hf_dir + "/" + f)) copy_over(hf_dir + "/" + f, d + "/" + f);
  return s;
}

std::vector<std::string> export_hf_tokenizer(const TokenizerSpec& spec, const std::string& hf_dir) {
  std::vector<std::string> out;
  if (spec.type.empty() || spec.type == "NullTokenizer" || spec.type == "ByteTokenizer") return out;
  fs::create_directories(hf_dir);
  std::string src_dir;
  auto carry = [&](const std::string& path, const char* hf_name) {
    if (path.empty()) return;
    copy_over(path, hf_dir + "/" + hf_name);
    out.push_back(hf_name);
    src_dir = fs::path(path).parent_path().string();
  };
  if (spec.type == "HuggingFaceTokenizer") {
    carry(spec.tokenizer_model, "tokenizer.json");
    // Tokens we appended (a new mask token) go into added_tokens, with the ids our tokenizer gave
    // them, so that transformers' tokenizer agrees with the exported embedding rows.
    if (!spec.added_special_tokens.empty()) {
      const auto tok = make_tokenizer(spec);
      const std::string path = hf_dir + "/tokenizer.json";
      nlohmann::json j = nlohmann::json::parse(read_file(path));
      if (!j.contains("added_tokens") || !j["added_tokens"].is_array()) j["added_tokens"] = nlohmann::json::array();
      for (const std::string& t : spec.added_special_tokens) {
        bool present = false;
        for (const auto& a : j["added_tokens"]) present |= a.value("content", std::string()) == t;
        if (present) continue;
        j["added_tokens"].push_back({{"id", tok->token_to_id(t)}, {"content", t}, {"single_word", false},
                                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", true}});
      }
      write_file_atomic(path, j.dump(2) + "\n");
    }
  }
  else if (spec.type == "GPT2BPETokenizer") {
    carry(spec.vocab_file, "vocab.json");
    carry(spec.merge_file, "merges.txt");
  } else if (spec.type == "SentencePieceTokenizer" || spec.type == "Llama2Tokenizer") {
    carry(spec.tokenizer_model, "tokenizer.model");
  }
  if (!src_dir.empty())
    for (const char* f : kSideFiles)
      if (std::string(f) != "generation_config.json" && fs::exists(src_dir + "/" + f)) {
        copy_over(src_dir + "/" + f, hf_dir + "/" + f);
        out.push_back(f);
      }
  return out;
}

}  // namespace megadlm
