#include "data/jsonl.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace megadlm {

// ---- UTF-8 validation -----------------------------------------------------------------------------
// Table-free DFA over the byte classes of RFC 3629 section 4; an ASCII fast path first, since corpora
// are mostly ASCII.
size_t utf8_invalid_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Eight ASCII bytes at a time.
    if (i + 8 <= n) {
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      if ((w & 0x8080808080808080ull) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c == 0xE0) {
      len = 3, lo = 0xA0;  // no overlong 3-byte forms
    } else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) {
      len = 3;
    } else if (c == 0xED) {
      len = 3, hi = 0x9F;  // no UTF-16 surrogates D800..DFFF
    } else if (c == 0xF0) {
      len = 4, lo = 0x90;  // no overlong 4-byte forms
    } else if (c >= 0xF1 && c <= 0xF3) {
      len = 4;
    } else if (c == 0xF4) {
      len = 4, hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;  // 0x80..0xC1 (continuation or overlong lead) and 0xF5..0xFF
    }
    if (i + len > n) return i;
    if (p[i + 1] < lo || p[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if ((p[i + k] & 0xC0) != 0x80) return i;
    i += len;
  }
  return std::string_view::npos;
}

// ---- JsonlReader ----------------------------------------------------------------------------------

JsonlReader::JsonlReader(const std::string& path, size_t max_line_bytes)
    : path_(path), max_line_bytes_(max_line_bytes) {
  require_readable_file(path);
  // gzopen reads plain files unchanged, so one code path serves both.
  gzFile g = gzopen(path.c_str(), "rb");
  if (!g) fail(path, ": cannot open (", errno ? std::strerror(errno) : "out of memory", ")");
  gzbuffer(g, 1 << 18);
  gz_ = g;
}

JsonlReader::~JsonlReader() {
  if (gz_) gzclose(static_cast<gzFile>(gz_));
}

bool JsonlReader::fill(size_t want) {
  constexpr size_t kBlock = 1 << 18;
  while (!eof_ && pending_.size() - pending_at_ < want) {
    // Drop what was already handed out before growing the buffer.
    if (pending_at_ > 0) {
      pending_.erase(0, pending_at_);
      pending_at_ = 0;
    }
    const size_t old = pending_.size();
    pending_.resize(old + kBlock);
    const int got = gzread(static_cast<gzFile>(gz_), pending_.data() + old, static_cast<unsigned>(kBlock));
    if (got < 0) {
      int code = 0;
      const char* msg = gzerror(static_cast<gzFile>(gz_), &code);
      pending_.resize(old);
      fail(path_, ": read error near line ", next_line_number_, " (", msg ? msg : "unknown", ")");
    }
    pending_.resize(old + static_cast<size_t>(got));
    if (got == 0) {
      // gzread returns 0 both at a clean end and at a truncated gzip stream; gzerror tells them apart.
      int code = 0;
      const char* msg = gzerror(static_cast<gzFile>(gz_), &code);
      if (code != Z_OK && code != Z_STREAM_END)
        fail(path_, ": read error near line ", next_line_number_, " (", msg ? msg : "unknown", ")");
      eof_ = true;
    }
  }
  return pending_.size() > pending_at_;
}

bool JsonlReader::next_chunk(LineChunk& chunk, size_t target_bytes) {
  target_bytes = std::max<size_t>(target_bytes, 1);
  fill(target_bytes);
  // Extend until the buffer holds at least one newline past the target (or the input ends).
  size_t cut = std::string::npos;  // one past the last '\n' we hand out
  // Bytes (from pending_at_) already searched for the crossing line's '\n': each pass of the loop
  // looks only at what the last fill added, so a long line costs linear time, not quadratic.
  size_t searched = target_bytes - 1;
  for (;;) {
    const size_t avail = pending_.size() - pending_at_;
    if (avail == 0) return false;
    const char* base = pending_.data() + pending_at_;
    if (avail >= target_bytes) {
      // The end of the line that crosses the target.
      const void* nl = std::memchr(base + searched, '\n', avail - searched);
      if (nl) {
        cut = static_cast<size_t>(static_cast<const char*>(nl) - base) + 1;
        break;
      }
      searched = avail;
    }
    if (eof_) {
      cut = avail;  // the last line, possibly without a newline
      break;
    }
    // Bound the memory: the unfinished line at the end of the buffer may not exceed the limit. Past
    // target_bytes - 1 there is no '\n' (searched above), so only the start needs a backward scan.
    const auto* last_nl =
        static_cast<const char*>(memrchr(base, '\n', avail >= target_bytes ? target_bytes - 1 : avail));
    const size_t tail = last_nl ? avail - static_cast<size_t>(last_nl - base + 1) : avail;
    if (tail > max_line_bytes_) {
      int64_t line = next_line_number_;
      for (const char* q = base; (q = static_cast<const char*>(std::memchr(q, '\n', static_cast<size_t>(base + avail - q))));
           ++q)
        ++line;
      fail(path_, ": line ", line, " is longer than ", max_line_bytes_, " bytes");
    }
    fill(avail + (size_t(1) << 18));
  }
  const char* base = pending_.data() + pending_at_;
  chunk.text.assign(base, cut);
  pending_at_ += cut;
  int64_t lines = 0;
  for (const char* q = base; (q = static_cast<const char*>(std::memchr(q, '\n', static_cast<size_t>(base + cut - q))));
       ++q)
    ++lines;
  if (cut > 0 && base[cut - 1] != '\n') ++lines;  // the final line without a newline
  chunk.first_line = next_line_number_;
  chunk.num_lines = lines;
  next_line_number_ += lines;
  bytes_read_ += static_cast<int64_t>(cut);
  return true;
}

bool JsonlReader::next_line(std::string& line, int64_t& line_number) {
  const size_t avail0 = pending_.size() - pending_at_;
  const void* nl = avail0 ? std::memchr(pending_.data() + pending_at_, '\n', avail0) : nullptr;
  while (!nl && !eof_) {
    const size_t avail = pending_.size() - pending_at_;  // searched: no '\n' in it
    if (avail > max_line_bytes_) fail(path_, ": line ", next_line_number_, " is longer than ", max_line_bytes_, " bytes");
    fill(avail + (size_t(1) << 18));
    const size_t now = pending_.size() - pending_at_;
    nl = now > avail ? std::memchr(pending_.data() + pending_at_ + avail, '\n', now - avail) : nullptr;
  }
  const size_t avail = pending_.size() - pending_at_;
  if (avail == 0) return false;
  const char* base = pending_.data() + pending_at_;
  const size_t len = nl ? static_cast<size_t>(static_cast<const char*>(nl) - base) : avail;
  line.assign(base, len);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const size_t consumed = nl ? len + 1 : len;
  pending_at_ += consumed;
  bytes_read_ += static_cast<int64_t>(consumed);
  line_number = next_line_number_++;
  return true;
}

// ---- one line -----------------------------------------------------------------------------------------

const char* line_status_name(LineStatus s) {
  switch (s) {
    case LineStatus::Ok: return "ok";
    case LineStatus::Blank: return "blank line";
    case LineStatus::InvalidUtf8: return "invalid UTF-8";
    case LineStatus::InvalidJson: return "invalid JSON";
    case LineStatus::NotObject: return "not a JSON object";
    case LineStatus::MissingKey: return "missing key";
    case LineStatus::NotString: return "value is not a string";
    case LineStatus::BadConversation: return "bad conversation";
  }
  return "unknown";
}

LineStatus parse_json_object_line(std::string_view line, nlohmann::json& j, std::string& error) {
  if (std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; })) {
    error = "blank line";
    return LineStatus::Blank;
  }
  if (const size_t at = utf8_invalid_at(line); at != std::string_view::npos) {
    error = "invalid UTF-8 at byte " + std::to_string(at);
    return LineStatus::InvalidUtf8;
  }
  try {
    j = nlohmann::json::parse(line.begin(), line.end());
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's message carries the column ("syntax error while parsing value - ...") and then the
    // text last read, which for a huge line is huge: keep the start, so a report stays one short line.
    std::string what = e.what();
    if (what.size() > 240) what = what.substr(0, 240) + "...";
    error = "invalid JSON: " + what;
    return LineStatus::InvalidJson;
  }
  if (!j.is_object()) {
    error = std::string("not a JSON object (a ") + j.type_name() + ")";
    return LineStatus::NotObject;
  }
  return LineStatus::Ok;
}

ParsedLine parse_jsonl_line(std::string_view line, const std::vector<std::string>& keys) {
  ParsedLine out;
  auto bad = [&](LineStatus s, std::string msg) {
    out.status = s;
    out.error = std::move(msg);
    out.texts.clear();
    return out;
  };
  nlohmann::json j;
  std::string error;
  if (const LineStatus s = parse_json_object_line(line, j, error); s != LineStatus::Ok) return bad(s, std::move(error));
  out.texts.resize(keys.size());
  for (size_t k = 0; k < keys.size(); ++k) {
    auto it = j.find(keys[k]);
    if (it == j.end()) return bad(LineStatus::MissingKey, "missing key '" + keys[k] + "'");
    if (it->is_string()) {
      out.texts[k].push_back(std::move(it->get_ref<std::string&>()));
    } else if (it->is_array()) {
      for (auto& e : *it) {
        if (!e.is_string())
          return bad(LineStatus::NotString, "key '" + keys[k] + "' holds an array with a " + e.type_name() +
                                                ", not only strings");
        out.texts[k].push_back(std::move(e.get_ref<std::string&>()));
      }
    } else {
      return bad(LineStatus::NotString, "key '" + keys[k] + "' holds a " + it->type_name() + ", not a string");
    }
  }
  return out;
}

}  // namespace megadlm
