#pragma once
// What the BERT training tests share: a tiny WordPiece vocabulary, a small synthetic sentence-split
// corpus whose structure both heads can learn, and the flags of a tiny BERT run on it.
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "core/philox.h"
#include "data/indexed_dataset.h"

namespace megadlm::test {

// The vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK], then w5 .. w40: 9 bands of 4 ids.
constexpr int32_t kBertBand = 4, kBertBands = 9, kBertVocab = 5 + kBertBand * kBertBands;

inline std::string write_bert_vocab(const std::string& dir) {
  const std::string path = dir + "/vocab.txt";
  std::ofstream out(path);
  for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}) out << s << "\n";
  for (int32_t i = 5; i < kBertVocab; ++i) out << "w" << i << "\n";
  return path;
}

// Documents of 2 to 8 sentences of 4 to 12 tokens with structure both heads can learn: sentence k of
// a document draws its ids from band k (ids 5 + 4k .. 8 + 4k), the first of them 7 times in 10 and
// the others 1 in 10 each, so the ids are skewed and a masked token's band follows from its
// neighbours; whether the bands rise from A to B shows whether A and B were swapped. sentences_per_doc 1
// gives document-level data (one sentence per document).
inline std::string write_ordered_corpus(const std::string& dir, int docs, int sentences_per_doc = 0) {
  const std::string prefix = dir + "/ordered";
  CounterRng rng(11, RngPurpose::Test);
  IndexedDatasetWriter w(prefix, IndexDType::U16);
  uint32_t draw = 0;
  for (int d = 0; d < docs; ++d) {
    const int sentences = sentences_per_doc > 0 ? sentences_per_doc : 2 + static_cast<int>(rng.uniform(d, draw++) * 7);
    std::vector<int32_t> tokens, lengths;
    for (int k = 0; k < sentences; ++k) {
      const int len = 4 + static_cast<int>(rng.uniform(d, draw++) * 9);
      for (int j = 0; j < len; ++j)
        tokens.push_back(5 + kBertBand * (k % kBertBands) +
                         std::max(0, static_cast<int32_t>(rng.uniform(d, draw++) * 10) - 6));
      lengths.push_back(len);
    }
    w.add_document(tokens.data(), static_cast<int64_t>(tokens.size()), lengths);
  }
  w.finalize();
  return prefix;
}

// A hidden-32 2-layer BERT, 16 sequences of 48 a step in micro-batches of 8, logged every step.
inline std::vector<std::string> bert_flags(const std::string& data, const std::string& vocab) {
  return {"--model-type", "bert", "--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
          "--seq-length", "48", "--micro-batch-size", "8", "--global-batch-size", "16", "--lr", "3e-3",
          "--lr-decay-style", "constant", "--tokenizer-type", "BertWordPieceLowerCase", "--vocab-file", vocab,
          "--data-path", data, "--split", "95,5,0", "--log-interval", "1", "--eval-interval", "1000",
          "--eval-iters", "2", "--seed", "7"};
}

// flags with the value of `name` replaced by `value`.
inline std::vector<std::string> set_flag(std::vector<std::string> flags, const std::string& name,
                                         const std::string& value) {
  for (size_t i = 0; i + 1 < flags.size(); ++i)
    if (flags[i] == name) flags[i + 1] = value;
  return flags;
}

}  // namespace megadlm::test
