#pragma once
// TensorBoard event files without TensorFlow: a TFRecord file (each record: uint64 LE length, its
// masked CRC-32C, the bytes, their masked CRC-32C) of serialized tensorflow.Event protobufs, the
// first holding file_version "brain.Event:2", then one Event per scalar (a Summary with one
// Value{tag, simple_value}), as PyTorch's and Megatron's SummaryWriter write them. The few protobuf
// fields are encoded by hand: the .proto files are TensorFlow's and no package ships them.
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace megadlm {

// Serialized tensorflow.Event payloads (a record's bytes).
std::string encode_file_version_event(double wall_time, const std::string& source_writer);
std::string encode_scalar_event(double wall_time, int64_t step, const std::string& tag, float value);
// A payload framed as one TFRecord.
std::string tfrecord(const std::string& payload);

// Seconds since the epoch, as Event.wall_time holds them.
double wall_time_now();

// Creates `dir` when missing and returns a new event file's path in it:
// events.out.tfevents.<10-digit start seconds>.<hostname>.<pid>.<n>, TensorBoard's own naming (it
// reads files with "tfevents" in the name), unique within the process by n. Error naming dir.
std::string new_event_file_path(const std::string& dir, double start_time);

struct TensorBoardWriterOptions {
  double start_time = -1;                  // wall time of the file-version event (< 0: now)
  std::string source_writer = "megadlm";  // Event.source_metadata.writer of the first event
};

// Writes one event file. Scalars are kept until flush(), which appends them and flushes the stream,
// so that a killed run keeps every batch flushed before it. Write errors are Errors naming the file.
class TensorBoardWriter {
 public:
  // Creates (or truncates) `path` and writes the file-version event.
  explicit TensorBoardWriter(std::string path, const TensorBoardWriterOptions& options = {});
  ~TensorBoardWriter();  // flushes what is pending; a failure there is logged, not thrown
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step, double wall_time);
  void add_scalar(const std::string& tag, double value, int64_t step) {
    add_scalar(tag, value, step, wall_time_now());
  }
  void flush();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  std::string pending_;  // framed records not yet written
};

// One decoded Event: the fields this writer uses (others are skipped).
struct TensorBoardEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;   // set on the first event
  std::string source_writer;  // source_metadata.writer
  std::vector<std::pair<std::string, float>> scalars;  // summary values with a simple_value
};

// Reads an event file back, checking every record's length and CRCs. Error naming the file and the
// record's offset on a truncated or corrupt record or a malformed Event.
std::vector<TensorBoardEvent> read_event_file(const std::string& path);

}  // namespace megadlm
