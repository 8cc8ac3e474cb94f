// Fuzz target: the .jsonl path of preprocess_data (data/jsonl.h).
//
// Input: one mode byte, then the file content. The content is
//  1. cut into lines and each line checked with parse_jsonl_line (UTF-8, JSON, object, keys), and
//  2. written to a file and read back with JsonlReader, once in chunks (next_chunk) and once line by
//     line (next_line); both must give the same lines, and, for a plain (not gzip) file, the lines
//     of step 1. gzip input (1f 8b) is decompressed by the reader.
// Mode bits: 0 -> keys {"text"} or {"text", "title"}; 1 -> a 64-byte line limit instead of 1 MiB;
// 2..7 -> the chunk target size (1..64 bytes) so that lines cross chunk boundaries.
#include <string>
#include <vector>

#include "core/error.h"
#include "data/jsonl.h"
#include "fuzz_util.h"

using namespace megadlm;

namespace {

void check_line(std::string_view line, const std::vector<std::string>& keys) {
  const ParsedLine p = parse_jsonl_line(line, keys);
  if (p.status != LineStatus::Ok) {
    FUZZ_REQUIRE(!p.error.empty(), "a bad line comes with a message");
    FUZZ_REQUIRE(p.texts.empty(), "a bad line has no texts");
    return;
  }
  FUZZ_REQUIRE(p.texts.size() == keys.size(), "one text list per key");
  // The tokenizers downstream rely on the extracted texts being valid UTF-8.
  for (const auto& list : p.texts)
    for (const std::string& t : list) FUZZ_REQUIRE(utf8_invalid_at(t) == std::string_view::npos, "text is valid UTF-8");
}

// The lines of the file through next_chunk, or false when the reader rejected it (Error).
bool read_chunked(const std::string& path, size_t limit, size_t target, std::vector<std::string>& lines) {
  try {
    JsonlReader r(path, limit);
    LineChunk chunk;
    int64_t expect_first = 1;
    while (r.next_chunk(chunk, target)) {
      FUZZ_REQUIRE(chunk.first_line == expect_first, "chunks number their lines consecutively");
      FUZZ_REQUIRE(!chunk.text.empty() && chunk.num_lines >= 1, "a chunk holds at least one line");
      int64_t n = 0;
      for_each_line(chunk, [&](int64_t number, std::string_view line) {
        FUZZ_REQUIRE(number == chunk.first_line + n, "line numbers inside a chunk");
        lines.emplace_back(line);
        ++n;
      });
      FUZZ_REQUIRE(n == chunk.num_lines, "num_lines matches the lines for_each_line finds");
      expect_first += n;
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

bool read_by_line(const std::string& path, size_t limit, std::vector<std::string>& lines) {
  try {
    JsonlReader r(path, limit);
    std::string line;
    int64_t number = 0;
    while (r.next_line(line, number)) {
      FUZZ_REQUIRE(number == static_cast<int64_t>(lines.size()) + 1, "next_line numbers lines from 1");
      lines.push_back(line);
    }
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0];
  const std::string_view text = fuzz::as_view(data + 1, size - 1);
  const std::vector<std::string> keys =
      (mode & 1) ? std::vector<std::string>{"text", "title"} : std::vector<std::string>{"text"};
  const size_t limit = (mode & 2) ? 64 : (size_t(1) << 20);
  const size_t target = static_cast<size_t>(mode >> 2) + 1;

  // 1. In memory, as preprocess_data's workers see a chunk.
  LineChunk chunk;
  chunk.text.assign(text);
  std::vector<std::string> direct;
  for_each_line(chunk, [&](int64_t, std::string_view line) {
    check_line(line, keys);
    direct.emplace_back(line);
  });

  // 2. Through the reader.
  const std::string path = fuzz::write_scratch("input.jsonl", text.data(), text.size());
  std::vector<std::string> chunked, by_line;
  const bool ok_chunked = read_chunked(path, limit, target, chunked);
  const bool ok_by_line = read_by_line(path, limit, by_line);
  const bool gzip = text.size() >= 2 && static_cast<uint8_t>(text[0]) == 0x1f && static_cast<uint8_t>(text[1]) == 0x8b;
  if (ok_chunked && ok_by_line) FUZZ_REQUIRE(chunked == by_line, "next_chunk and next_line agree");
  if (!gzip) {
    // A plain file is never an error unless a line exceeds the limit.
    size_t longest = 0;
    for (const std::string& l : direct) longest = std::max(longest, l.size());
    if (longest + 1 < limit) FUZZ_REQUIRE(ok_chunked && ok_by_line, "a plain file with short lines reads");
    if (ok_chunked) FUZZ_REQUIRE(chunked == direct, "the reader gives the file's lines");
    if (ok_by_line) FUZZ_REQUIRE(by_line == direct, "next_line gives the file's lines");
  }
  for (const std::string& l : chunked) check_line(l, keys);
  return 0;
}
