#pragma once
// A rule-based English sentence splitter for preprocess_data --split-sentences (Megatron splits with
// NLTK's punkt, which is Python only; docs/bert_t5_data.md describes the rules and their limits).
//
// A sentence ends after a run of terminal punctuation (. ! ?) and any closing quotes or brackets
// () ] " ' and the curly quotes), when whitespace follows and the next character can start a sentence:
// an upper-case letter (ASCII or Latin-1), a digit, or an opening quote or bracket. A single '.' does
// not end a sentence after
//   - a known abbreviation (Mr. Mrs. Dr. Prof. St. Jr. vs. Inc. Gen. Jan. ...; case-insensitive),
//   - a word with a period inside it (U.S. e.g. i.e. a.m. Ph.D.),
//   - a single upper-case letter (the initial of "J. Smith").
// A period between digits (3.14) has no whitespace after it and so never ends a sentence.
//
// Sentences start at their first non-whitespace character. Without keep_newlines a sentence ends at its
// punctuation; with keep_newlines it also keeps the whitespace (newlines included) that follows it, as
// Megatron's --keep-newlines makes punkt do; the last sentence never ends with whitespace. Text of
// whitespace only gives no sentence.
#include <string_view>
#include <vector>

namespace megadlm {

std::vector<std::string_view> split_sentences(std::string_view text, bool keep_newlines);

}  // namespace megadlm
