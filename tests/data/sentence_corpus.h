#pragma once
// Sentence-split data for the BERT and T5 dataset tests: a synthetic corpus written directly, and
// Brown (../shared/data/brown.jsonl) through preprocess_jsonl --split-sentences with the WordPiece
// test vocabulary.
#include <memory>
#include <string>
#include <vector>

#include "core/philox.h"
#include "data/indexed_dataset.h"
#include "data/preprocess.h"
#include "test_util.h"
#include "tokenizers/tokenizer_fixtures.h"

namespace megadlm::test {

// The synthetic vocabulary: the four special ids below, then ordinary ids; ids from
// kSyntheticFirstContinuation on play the "##" continuation tokens.
inline constexpr int32_t kSyntheticPad = 0, kSyntheticCls = 2, kSyntheticSep = 3, kSyntheticMask = 4;
inline constexpr int32_t kSyntheticVocab = 1000, kSyntheticFirstContinuation = 800;

// Writes `docs` documents of 0 to 11 sentences of 3 to 40 tokens each (ids in [5, kSyntheticVocab));
// returns each document's sentences.
inline std::vector<std::vector<std::vector<int32_t>>> write_sentence_corpus(const std::string& prefix, int docs,
                                                                            uint64_t seed) {
  CounterRng rng(seed, RngPurpose::Test);
  IndexedDatasetWriter w(prefix, IndexDType::U16);
  std::vector<std::vector<std::vector<int32_t>>> out;
  uint32_t draw = 0;
  for (int d = 0; d < docs; ++d) {
    const int sentences = static_cast<int>(rng.uniform(d, draw++) * 12);
    std::vector<int32_t> tokens, lengths;
    out.emplace_back();
    for (int s = 0; s < sentences; ++s) {
      const int len = 3 + static_cast<int>(rng.uniform(d, draw++) * 38);
      std::vector<int32_t> sentence;
      for (int k = 0; k < len; ++k) sentence.push_back(5 + static_cast<int32_t>(rng.uniform(d, draw++) * (kSyntheticVocab - 5)));
      tokens.insert(tokens.end(), sentence.begin(), sentence.end());
      lengths.push_back(len);
      out.back().push_back(sentence);
    }
    w.add_document(tokens.data(), static_cast<int64_t>(tokens.size()), lengths);
  }
  w.finalize();
  return out;
}

// Brown through preprocess_data with the WordPiece test vocabulary (uncased): the dataset prefix,
// sentence-split or not; "" when ../shared/data/brown.jsonl is absent.
inline std::string preprocess_brown(const std::string& dir, bool split_sentences) {
  const std::string brown = shared_path("data/brown.jsonl");
  if (brown.empty()) return "";
  PreprocessOptions o;
  o.input = brown;
  o.output_prefix = dir + "/brown";
  o.tokenizer.type = "BertWordPieceLowerCase";
  o.tokenizer.vocab_file = tokenizer_fixture("wordpiece_vocab.txt");
  o.split_sentences = split_sentences;
  o.workers = 2;
  o.log = false;
  return preprocess_jsonl(o).output_prefixes.at(0);
}

}  // namespace megadlm::test
