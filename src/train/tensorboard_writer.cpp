#include "train/tensorboard_writer.h"

#include <unistd.h>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"

namespace megadlm {

namespace {

// Protobuf wire types and the field numbers of tensorflow.Event, Summary, Summary.Value and
// SourceMetadata (tensorflow/core/util/event.proto, tensorflow/core/framework/summary.proto).
enum Wire : uint32_t { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5,
                   kEventSourceMetadata = 10;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2;
constexpr uint32_t kSourceWriter = 1;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, uint32_t field, Wire wire) { put_varint(out, (static_cast<uint64_t>(field) << 3) | wire); }

template <typename T>
void put_le(std::string& out, T v) {
  for (size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kBytes);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// wall_time and step are proto3 scalars without presence: written only when not zero (by bits, as
// protobuf decides), so that our bytes are the serializer's bytes.
void put_event_header(std::string& out, double wall_time, int64_t step) {
  const auto bits = std::bit_cast<uint64_t>(wall_time);
  if (bits != 0) {
    put_key(out, kEventWallTime, kFixed64);
    put_le(out, bits);
  }
  if (step != 0) {
    put_key(out, kEventStep, kVarint);
    put_varint(out, static_cast<uint64_t>(step));
  }
}

// A little reader over one protobuf message; every read is bounds-checked and fails with `what`.
class WireReader {
 public:
  WireReader(std::string_view data, const std::string& what) : data_(data), what_(what) {}
  bool done() const { return pos_ >= data_.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      MEGADLM_CHECK(pos_ < data_.size(), what_, ": truncated varint");
      const auto b = static_cast<uint8_t>(data_[pos_++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    fail(what_, ": varint longer than 10 bytes");
  }
  template <typename T>
  T fixed() {
    MEGADLM_CHECK(data_.size() - pos_ >= sizeof(T), what_, ": truncated fixed-width field");
    T v = 0;
    for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    pos_ += sizeof(T);
    return v;
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    MEGADLM_CHECK(n <= data_.size() - pos_, what_, ": length-delimited field of ", n, " bytes runs past its message");
    const std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case kVarint: varint(); break;
      case kFixed64: fixed<uint64_t>(); break;
      case kBytes: bytes(); break;
      case kFixed32: fixed<uint32_t>(); break;
      default: fail(what_, ": unsupported protobuf wire type ", wire);
    }
  }

 private:
  std::string_view data_;
  const std::string& what_;
  size_t pos_ = 0;
};

void read_value(std::string_view bytes, const std::string& what, TensorBoardEvent& e) {
  WireReader r(bytes, what);
  std::string tag;
  bool has_simple = false;
  float simple = 0;
  while (!r.done()) {
    const uint64_t key = r.varint();
    const auto field = static_cast<uint32_t>(key >> 3), wire = static_cast<uint32_t>(key & 7);
    if (field == kValueTag && wire == kBytes) tag = std::string(r.bytes());
    else if (field == kValueSimpleValue && wire == kFixed32) {
      simple = std::bit_cast<float>(r.fixed<uint32_t>());
      has_simple = true;
    } else r.skip(wire);
  }
  if (has_simple) e.scalars.emplace_back(std::move(tag), simple);
}

TensorBoardEvent read_event(std::string_view bytes, const std::string& what) {
  TensorBoardEvent e;
  WireReader r(bytes, what);
  while (!r.done()) {
    const uint64_t key = r.varint();
    const auto field = static_cast<uint32_t>(key >> 3), wire = static_cast<uint32_t>(key & 7);
    if (field == kEventWallTime && wire == kFixed64) e.wall_time = std::bit_cast<double>(r.fixed<uint64_t>());
    else if (field == kEventStep && wire == kVarint) e.step = static_cast<int64_t>(r.varint());
    else if (field == kEventFileVersion && wire == kBytes) e.file_version = std::string(r.bytes());
    else if (field == kEventSummary && wire == kBytes) {
      WireReader s(r.bytes(), what);
      while (!s.done()) {
        const uint64_t k = s.varint();
        if ((k >> 3) == kSummaryValue && (k & 7) == kBytes) read_value(s.bytes(), what, e);
        else s.skip(static_cast<uint32_t>(k & 7));
      }
    } else if (field == kEventSourceMetadata && wire == kBytes) {
      WireReader m(r.bytes(), what);
      while (!m.done()) {
        const uint64_t k = m.varint();
        if ((k >> 3) == kSourceWriter && (k & 7) == kBytes) e.source_writer = std::string(m.bytes());
        else m.skip(static_cast<uint32_t>(k & 7));
      }
    } else r.skip(wire);
  }
  return e;
}

uint32_t read_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

uint64_t read_u64(const std::string& s, size_t at) {
  return static_cast<uint64_t>(read_u32(s, at)) | (static_cast<uint64_t>(read_u32(s, at + 4)) << 32);
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

std::string encode_file_version_event(double wall_time, const std::string& source_writer) {
  std::string out;
  put_event_header(out, wall_time, 0);
  put_bytes(out, kEventFileVersion, "brain.Event:2");
  std::string meta;
  if (!source_writer.empty()) put_bytes(meta, kSourceWriter, source_writer);
  put_bytes(out, kEventSourceMetadata, meta);
  return out;
}

std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  std::string v;
  if (!tag.empty()) put_bytes(v, kValueTag, tag);
  // simple_value is a member of the `value` oneof: present, so written even when 0.
  put_key(v, kValueSimpleValue, kFixed32);
  put_le(v, std::bit_cast<uint32_t>(value));
  std::string summary;
  put_bytes(summary, kSummaryValue, v);
  std::string out;
  put_event_header(out, wall_time, step);
  put_bytes(out, kEventSummary, summary);
  return out;
}

std::string tfrecord(const std::string& payload) {
  std::string out;
  put_le(out, static_cast<uint64_t>(payload.size()));
  put_le(out, masked_crc32c(out));
  out += payload;
  put_le(out, masked_crc32c(payload));
  return out;
}

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string new_event_file_path(const std::string& dir, double start_time) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MEGADLM_CHECK(!ec, dir, ": cannot create the TensorBoard directory (", ec.message(), ")");
  MEGADLM_CHECK(std::filesystem::is_directory(dir), dir, ": not a directory (TensorBoard event files go in a directory)");
  static std::atomic<int64_t> counter{0};
  char secs[32];
  std::snprintf(secs, sizeof secs, "%010lld", static_cast<long long>(start_time));
  return dir + "/events.out.tfevents." + secs + "." + host_name() + "." + std::to_string(::getpid()) + "." +
         std::to_string(counter.fetch_add(1));
}

TensorBoardWriter::TensorBoardWriter(std::string path, const TensorBoardWriterOptions& options)
    : path_(std::move(path)) {
  f_ = std::fopen(path_.c_str(), "wb");
  MEGADLM_CHECK(f_ != nullptr, path_, ": cannot create the TensorBoard event file (", errno_text(), ")");
  const double start = options.start_time >= 0 ? options.start_time : wall_time_now();
  pending_ = tfrecord(encode_file_version_event(start, options.source_writer));
  flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (!f_) return;
  try {
    flush();
  } catch (const Error& e) {
    log_info("warning: ", e.what());
  }
  std::fclose(f_);
}

void TensorBoardWriter::add_scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  pending_ += tfrecord(encode_scalar_event(wall_time, step, tag, static_cast<float>(value)));
}

void TensorBoardWriter::flush() {
  const size_t n = pending_.size();
  const bool ok = std::fwrite(pending_.data(), 1, n, f_) == n && std::fflush(f_) == 0;
  // Written or not, the batch is dropped: retrying would duplicate the part that reached the file.
  pending_.clear();
  MEGADLM_CHECK(ok, path_, ": write failed (", errno_text(), ")");
}

std::vector<TensorBoardEvent> read_event_file(const std::string& path) {
  const std::string s = read_file(path);
  std::vector<TensorBoardEvent> out;
  size_t at = 0;
  while (at < s.size()) {
    const std::string where = path + ": record at byte " + std::to_string(at);
    MEGADLM_CHECK(s.size() - at >= 12, where, ": truncated record header");
    const uint64_t len = read_u64(s, at);
    MEGADLM_CHECK(read_u32(s, at + 8) == masked_crc32c(std::string_view(s).substr(at, 8)), where,
                  ": the length's CRC does not match");
    MEGADLM_CHECK(len <= s.size() - at - 12 && s.size() - at - 12 - len >= 4, where, ": truncated (", len,
                  " bytes announced)");
    const std::string_view payload = std::string_view(s).substr(at + 12, len);
    MEGADLM_CHECK(read_u32(s, at + 12 + len) == masked_crc32c(payload), where, ": the data's CRC does not match");
    out.push_back(read_event(payload, where));
    at += 12 + len + 4;
  }
  return out;
}

}  // namespace megadlm
