#include "data/sentence_split.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <string>

namespace megadlm {

namespace {

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_terminal(char c) { return c == '.' || c == '!' || c == '?'; }

// The byte length of the closing quote or bracket at text[i], 0 when there is none.
size_t closer_at(std::string_view text, size_t i) {
  const char c = text[i];
  if (c == ')' || c == ']' || c == '"' || c == '\'') return 1;
  // U+201D and U+2019, the right double and single quotation marks.
  if (text.substr(i, 3) == "\xE2\x80\x9D" || text.substr(i, 3) == "\xE2\x80\x99") return 3;
  return 0;
}

// Whether a sentence can start at text[i] (a non-space character).
bool starts_sentence(std::string_view text, size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  if ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
  if (c == '"' || c == '\'' || c == '(' || c == '[') return true;
  // U+201C and U+2018, the left double and single quotation marks.
  if (text.substr(i, 3) == "\xE2\x80\x9C" || text.substr(i, 3) == "\xE2\x80\x98") return true;
  // Latin-1 upper-case letters U+00C0..U+00DE (UTF-8 C3 80..C3 9E) but the multiplication sign U+00D7.
  if (c == 0xC3 && i + 1 < text.size()) {
    const auto d = static_cast<unsigned char>(text[i + 1]);
    return d >= 0x80 && d <= 0x9E && d != 0x97;
  }
  return false;
}

// Abbreviations that a period follows inside a sentence (lower case).
constexpr std::array<std::string_view, 44> kAbbreviations = {
    "mr",   "mrs",  "ms",  "dr",   "prof", "sr",     "jr",   "st",  "mt",   "vs",   "messrs",
    "gen",  "col",  "lt",  "sgt",  "capt", "cmdr",   "adm",  "gov", "sen",  "rep",  "rev",
    "hon",  "pres", "inc", "ltd",  "co",   "corp",   "bros", "jan", "feb",  "aug",  "sept",
    "oct",  "nov",  "dec", "fig",  "approx", "dept", "vol",  "pp",  "cf",   "ave",  "blvd"};

// Whether the '.' at text[dot] ends an abbreviation or an initial rather than a sentence.
bool period_after_abbreviation(std::string_view text, size_t dot) {
  size_t b = dot;
  while (b > 0 && !is_space(static_cast<unsigned char>(text[b - 1]))) --b;
  std::string_view word = text.substr(b, dot - b);
  while (!word.empty() && (word.front() == '(' || word.front() == '"' || word.front() == '\'' || word.front() == '['))
    word.remove_prefix(1);
  if (word.empty()) return false;
  if (word.size() == 1) return word[0] >= 'A' && word[0] <= 'Z';  // an initial
  const bool letters_and_periods = std::all_of(word.begin(), word.end(), [](char c) {
    return c == '.' || std::isalpha(static_cast<unsigned char>(c));
  });
  if (letters_and_periods && word.find('.') != std::string_view::npos) return true;  // U.S. e.g. Ph.D.
  std::string lower(word);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return std::find(kAbbreviations.begin(), kAbbreviations.end(), lower) != kAbbreviations.end();
}

size_t skip_space(std::string_view text, size_t i) {
  while (i < text.size() && is_space(static_cast<unsigned char>(text[i]))) ++i;
  return i;
}

}  // namespace

std::vector<std::string_view> split_sentences(std::string_view text, bool keep_newlines) {
  std::vector<std::string_view> out;
  const size_t n = text.size();
  size_t start = skip_space(text, 0);
  size_t i = start;
  while (i < n) {
    if (!is_terminal(text[i])) {
      ++i;
      continue;
    }
    size_t run = i + 1;  // the end of the run of terminal punctuation
    while (run < n && is_terminal(text[run])) ++run;
    size_t end = run;  // then the closing quotes and brackets
    for (size_t len; end < n && (len = closer_at(text, end)) > 0;) end += len;
    const size_t next = skip_space(text, end);
    const bool lone_period = run == i + 1 && text[i] == '.';
    const bool ends = next > end && next < n && starts_sentence(text, next) &&
                      !(lone_period && period_after_abbreviation(text, i));
    if (ends) {
      out.push_back(text.substr(start, (keep_newlines ? next : end) - start));
      start = next;
    }
    i = ends ? next : end;
  }
  size_t last = n;
  while (last > start && is_space(static_cast<unsigned char>(text[last - 1]))) --last;
  if (last > start) out.push_back(text.substr(start, last - start));
  return out;
}

}  // namespace megadlm
