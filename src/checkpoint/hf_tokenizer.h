#pragma once
// Tokenizer files travelling with HuggingFace checkpoints: tokenizer.json (+ tokenizer_config.json,
// special_tokens_map.json), GPT-2's vocab.json + merges.txt, or a SentencePiece tokenizer.model.
#include <string>

#include "tokenizers/tokenizer.h"

namespace megadlm {

// Copies the tokenizer files present in hf_dir into dst_dir and returns the spec that rebuilds the
// tokenizer from the copies (absolute paths): HuggingFaceTokenizer for tokenizer.json, else
// GPT2BPETokenizer for vocab.json + merges.txt, else SentencePieceTokenizer for tokenizer.model.
// A spec with an empty type when hf_dir has no tokenizer.
TokenizerSpec import_hf_tokenizer(const std::string& hf_dir, const std::string& dst_dir);

// The spec of the tokenizer in hf_dir without copying (paths into hf_dir); empty type when none.
TokenizerSpec hf_tokenizer_spec(const std::string& hf_dir);

// Copies the files a spec names (under their HuggingFace names) and the JSON side files beside
// them (tokenizer_config.json, special_tokens_map.json) into hf_dir. Returns the files written.
std::vector<std::string> export_hf_tokenizer(const TokenizerSpec& spec, const std::string& hf_dir);

}  // namespace megadlm
