#pragma once
// Reading .jsonl corpora (one JSON object per line, as Megatron's preprocess_data.py takes them):
// - JsonlReader hands out whole lines in large chunks (so that worker threads can parse them) with
//   the 1-based number of each chunk's first line; gzip input (.gz) is decompressed transparently.
// - parse_jsonl_line checks one line (UTF-8, JSON, object, keys, string values) and says precisely
//   what is wrong with a bad line instead of throwing, so callers can count, report and skip it.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace megadlm {

// Byte offset of the first byte where `s` stops being well-formed UTF-8 (overlong forms, UTF-16
// surrogates and code points above U+10FFFF are rejected), or std::string_view::npos when valid.
size_t utf8_invalid_at(std::string_view s);

// Whole lines of the input, each ending in '\n' except possibly the last line of the file.
struct LineChunk {
  int64_t first_line = 1;  // 1-based number of the first line in `text`
  int64_t num_lines = 0;
  std::string text;
};

// Calls f(line_number, line) for every line of the chunk; `line` excludes the '\n' and a trailing '\r'.
template <typename F>
void for_each_line(const LineChunk& chunk, F&& f) {
  const char* p = chunk.text.data();
  const char* end = p + chunk.text.size();
  int64_t n = chunk.first_line;
  while (p < end) {
    const char* nl = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
    const char* stop = nl ? nl : end;
    size_t len = static_cast<size_t>(stop - p);
    if (len > 0 && p[len - 1] == '\r') --len;
    f(n++, std::string_view(p, len));
    p = nl ? nl + 1 : end;
  }
}

class JsonlReader {
 public:
  // Opens a plain or gzip-compressed file (recognised by its content, not its name). Throws Error
  // naming the path when it cannot be opened.
  explicit JsonlReader(const std::string& path, size_t max_line_bytes = size_t(1) << 30);
  ~JsonlReader();
  JsonlReader(const JsonlReader&) = delete;
  JsonlReader& operator=(const JsonlReader&) = delete;

  // Fills `chunk` with whole lines totalling about `target_bytes` (at least one line). Returns false
  // at the end of the input. Throws Error on a read or decompression error, or when an unfinished
  // line would grow the buffer beyond max_line_bytes, naming the file and the line.
  bool next_chunk(LineChunk& chunk, size_t target_bytes = size_t(1) << 20);
  // One line at a time (without '\n' / "\r\n"); false at the end of the input.
  bool next_line(std::string& line, int64_t& line_number);

  int64_t bytes_read() const { return bytes_read_; }  // uncompressed bytes handed out so far
  const std::string& path() const { return path_; }

 private:
  bool fill(size_t want);  // appends to pending_ until it holds `want` bytes or the input ends

  std::string path_;
  void* gz_ = nullptr;  // gzFile
  std::string pending_;
  size_t pending_at_ = 0;  // pending_[0, pending_at_) was already handed out
  bool eof_ = false;
  int64_t next_line_number_ = 1;
  int64_t bytes_read_ = 0;
  size_t max_line_bytes_;
};

enum class LineStatus { Ok, Blank, InvalidUtf8, InvalidJson, NotObject, MissingKey, NotString, BadConversation };
const char* line_status_name(LineStatus s);  // "invalid UTF-8", "invalid JSON", ...

struct ParsedLine {
  LineStatus status = LineStatus::Ok;
  std::string error;  // what is wrong, for a bad line ("missing key 'text'")
  // texts[k] = the value of keys[k]: one string, or every string of a JSON array of strings (Megatron
  // treats a list as the document's sentences).
  std::vector<std::vector<std::string>> texts;
};

// Checks and extracts `keys` from one line (without its newline). A blank line (only whitespace)
// reports Blank; every other fault reports its status and a message, never throws.
ParsedLine parse_jsonl_line(std::string_view line, const std::vector<std::string>& keys);

// The first checks of parse_jsonl_line: Blank, InvalidUtf8, InvalidJson or NotObject with `error`
// saying what is wrong, or Ok with `object` the line's JSON object. Never throws.
LineStatus parse_json_object_line(std::string_view line, nlohmann::json& object, std::string& error);

}  // namespace megadlm
