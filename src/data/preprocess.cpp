#include "data/preprocess.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "data/image_data.h"
#include "data/indexed_dataset.h"
#include "data/jsonl.h"
#include "data/sentence_split.h"
#include "tokenizers/marker_split_tokenizer.h"

namespace megadlm {

std::string document_prefix(const std::string& output_prefix, const std::string& key) {
  return output_prefix + "_" + key + "_document";
}

std::string sentence_prefix(const std::string& output_prefix, const std::string& key) {
  return output_prefix + "_" + key + "_sentence";
}

std::string sidecar_path(const std::string& data_prefix) { return data_prefix + ".tokenizer.json"; }

namespace {

// Keys the sidecar adds beside the TokenizerSpec fields.
constexpr const char* kSidecarExtraKeys[] = {"vocab_size", "eod", "dtype", "json_key", "append_eod", "chat_template",
                                             "loss_mask", "split_sentences", "image_data", "image_token_id"};

// One chunk of input lines, parsed (JSON only: the tokenizer is not needed yet).
struct ParsedChunk {
  int64_t id = -1;  // position in the input, in chunks
  int64_t lines = 0, bytes = 0;
  std::vector<std::pair<int64_t, ParsedLine>> lines_parsed;  // (1-based line number, the line)
  std::vector<std::pair<int64_t, ParsedConversation>> conversations;  // instead, with a chat template
  std::vector<LineImages> images;  // with --image-key: each line's images, in the order of the lines above
};

// One chunk of input lines, tokenized.
struct ChunkResult {
  int64_t lines = 0, documents = 0, blank = 0, bytes = 0;
  std::vector<BadLine> bad;  // every bad line of the chunk, in order
  struct PerKey {
    std::vector<int32_t> tokens;         // all documents' tokens back to back
    std::vector<int32_t> seq_lengths;    // all documents' sequence lengths back to back
    std::vector<int32_t> seqs_per_doc;   // [documents]
    std::vector<int32_t> mask;           // conversations: the loss mask of `tokens`
  };
  std::vector<PerKey> keys;
  std::vector<uint8_t> pixels;          // with --image-key: every document's images back to back
  std::vector<int32_t> images_per_doc;  // [documents]
};

// The images a worker processes, and the placeholder's id in its tokenizer.
struct WorkerImages {
  const ImageStep* step = nullptr;
  int32_t token_id = -1;
};

void parse_chunk(int64_t id, const LineChunk& chunk, const PreprocessOptions& opt,
                 const std::optional<ChatTemplate>& chat, ParsedChunk& out) {
  out.id = id;
  out.lines = chunk.num_lines;
  out.bytes = static_cast<int64_t>(chunk.text.size());
  out.lines_parsed.clear();
  out.conversations.clear();
  out.images.clear();
  if (!opt.image_key.empty()) {
    out.images.reserve(static_cast<size_t>(chunk.num_lines));
    for_each_line(chunk, [&](int64_t, std::string_view line) { out.images.push_back(line_images(line, opt.image_key)); });
  }
  if (chat) {
    out.conversations.reserve(static_cast<size_t>(chunk.num_lines));
    for_each_line(chunk, [&](int64_t line_no, std::string_view line) {
      out.conversations.emplace_back(line_no, parse_conversation_line(line, *chat));
    });
    return;
  }
  out.lines_parsed.reserve(static_cast<size_t>(chunk.num_lines));
  for_each_line(chunk, [&](int64_t line_no, std::string_view line) {
    out.lines_parsed.emplace_back(line_no, parse_jsonl_line(line, opt.json_keys));
  });
}

// The line's images, resized and cropped, into `pixels`; false, with the line recorded as bad, when
// its image key is malformed or an image cannot be read.
bool line_images_ok(const LineImages& images, const ImageStep& step, int64_t line_no, std::vector<uint8_t>& pixels,
                    ChunkResult& out) {
  if (!images.error.empty()) {
    out.bad.push_back({line_no, images.error});
    return false;
  }
  try {
    pixels = step.process(images);
  } catch (const Error& e) {
    out.bad.push_back({line_no, e.what()});
    return false;
  }
  return true;
}

// Appends a written line's images (line i of the chunk) to the chunk's image document.
void add_images(const std::vector<uint8_t>& pixels, const ParsedChunk& chunk, size_t i, ChunkResult& out) {
  if (chunk.images.empty()) return;
  out.pixels.insert(out.pixels.end(), pixels.begin(), pixels.end());
  out.images_per_doc.push_back(static_cast<int32_t>(chunk.images[i].paths.size()));
}

// Conversations: one document of one sequence each, with its loss mask; a conversation the tokenizer
// rejects makes the line bad and adds nothing.
void tokenize_conversations(ParsedChunk& chunk, const PreprocessOptions& opt, const Tokenizer& tok,
                            const ChatEncoder& enc, const WorkerImages& img, ChunkResult& out) {
  ChunkResult::PerKey& pk = out.keys[0];
  for (size_t i = 0; i < chunk.conversations.size(); ++i) {
    auto& [line_no, p] = chunk.conversations[i];
    if (p.status == LineStatus::Blank) {
      ++out.blank;
      continue;
    }
    if (p.status != LineStatus::Ok) {
      out.bad.push_back({line_no, std::move(p.error)});
      continue;
    }
    std::vector<uint8_t> pixels;
    if (img.step && !line_images_ok(chunk.images[i], *img.step, line_no, pixels, out)) continue;
    const size_t at = pk.tokens.size();
    std::string stage = "tokenizer: ";
    try {
      enc.encode(p.pieces, pk.tokens, pk.mask);
      if (opt.append_eod && pk.tokens.size() > at) {  // the eod ends the response: the model learns to stop
        pk.tokens.push_back(tok.eod());
        pk.mask.push_back(1);
      }
      const size_t n = pk.tokens.size() - at;
      MEGADLM_CHECK(n < static_cast<size_t>(std::numeric_limits<int32_t>::max()), "the conversation's ", n,
                    " tokens do not fit one sequence");
      stage = "";  // the check names what is wrong itself
      if (img.step)
        img.step->check_placeholders(pk.tokens.data() + at, pk.tokens.data() + pk.tokens.size(), img.token_id,
                                     chunk.images[i].paths.size());
      if (n > 0) pk.seq_lengths.push_back(static_cast<int32_t>(n));
      pk.seqs_per_doc.push_back(n > 0 ? 1 : 0);
    } catch (const Error& e) {
      pk.tokens.resize(at);
      pk.mask.resize(at);
      out.bad.push_back({line_no, stage + e.what()});
      continue;
    }
    add_images(pixels, chunk, i, out);
    ++out.documents;
  }
}

// `enc`: the chunk holds conversations, tokenized with it.
void tokenize_chunk(ParsedChunk& chunk, const PreprocessOptions& opt, const Tokenizer& tok, const ChatEncoder* enc,
                    const WorkerImages& img, ChunkResult& out) {
  const size_t nk = opt.json_keys.size();
  out.keys.assign(nk, {});
  out.lines = chunk.lines;
  out.bytes = chunk.bytes;
  if (enc) return tokenize_conversations(chunk, opt, tok, *enc, img, out);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < chunk.lines_parsed.size(); ++i) {
    auto& [line_no, p] = chunk.lines_parsed[i];
    if (p.status == LineStatus::Blank) {
      ++out.blank;
      continue;
    }
    if (p.status != LineStatus::Ok) {
      out.bad.push_back({line_no, std::move(p.error)});
      continue;
    }
    std::vector<uint8_t> pixels;
    if (img.step && !line_images_ok(chunk.images[i], *img.step, line_no, pixels, out)) continue;
    // A text the tokenizer rejects (NullTokenizer given words) makes the line bad; what the line
    // already appended for earlier keys is taken back so that the datasets stay aligned.
    std::string stage = "tokenizer: ";
    std::vector<std::array<size_t, 3>> sizes(nk);
    for (size_t k = 0; k < nk; ++k)
      sizes[k] = {out.keys[k].tokens.size(), out.keys[k].seq_lengths.size(), out.keys[k].seqs_per_doc.size()};
    try {
      for (size_t k = 0; k < nk; ++k) {
        ChunkResult::PerKey& pk = out.keys[k];
        int32_t seqs = 0;
        auto add_sequence = [&](std::string_view sentence) {
          ids.clear();
          tok.encode(sentence, ids);
          if (ids.empty()) return;  // as Megatron: an empty sentence adds no sequence
          MEGADLM_CHECK(ids.size() < static_cast<size_t>(std::numeric_limits<int32_t>::max()), "key '", opt.json_keys[k],
                        "': ", ids.size(), " tokens do not fit one sequence");
          pk.tokens.insert(pk.tokens.end(), ids.begin(), ids.end());
          pk.seq_lengths.push_back(static_cast<int32_t>(ids.size()));
          ++seqs;
        };
        for (const std::string& text : p.texts[k]) {
          if (!opt.split_sentences) {
            add_sequence(text);
            continue;
          }
          for (std::string_view sentence : split_sentences(text, opt.keep_newlines)) add_sequence(sentence);
        }
        if (seqs > 0 && opt.append_eod) {
          pk.tokens.push_back(tok.eod());
          ++pk.seq_lengths.back();
        }
        pk.seqs_per_doc.push_back(seqs);
      }
      stage = "";
      if (img.step)  // --image-key takes one text key (checked up front)
        img.step->check_placeholders(out.keys[0].tokens.data() + sizes[0][0],
                                     out.keys[0].tokens.data() + out.keys[0].tokens.size(), img.token_id,
                                     chunk.images[i].paths.size());
    } catch (const Error& e) {
      for (size_t k = 0; k < nk; ++k) {
        out.keys[k].tokens.resize(sizes[k][0]);
        out.keys[k].seq_lengths.resize(sizes[k][1]);
        out.keys[k].seqs_per_doc.resize(sizes[k][2]);
      }
      out.bad.push_back({line_no, stage + e.what()});
      continue;
    }
    add_images(pixels, chunk, i, out);
    ++out.documents;
  }
}

// Tokenizers whose encode() may run on several threads at once: the byte-level BPE ones share a
// lock-free cache of pieces and keep their other mutable state (scratch vectors) per thread. Workers
// share one of these, built once; the others are built per worker (they are cheap to build or,
// SentencePiece, make no promise).
bool encode_is_thread_safe(const std::string& type) {
  return type == "GPT2BPETokenizer" || type == "HuggingFaceTokenizer";
}

// The reader -> workers -> writer pipeline's shared state.
class Pipeline {
 public:
  // `chat`: the input is conversations rendered with this template. `images`: what to do with each
  // line's images (--image-key), or null.
  Pipeline(const PreprocessOptions& opt, std::optional<ChatTemplate> chat, const ImageStep* images, const Timer& timer)
      : opt_(opt),
        chat_(chat),
        images_(images),
        timer_(timer),
        reader_(opt.input),
        share_(encode_is_thread_safe(opt.tokenizer.type)) {
    max_in_flight_ = static_cast<int64_t>(4 * opt.workers);
    const size_t chunks_at_startup = kReadAheadAtStartup / std::max<size_t>(opt.chunk_bytes, 1);
    max_in_flight_at_startup_ = std::max<int64_t>(max_in_flight_, static_cast<int64_t>(chunks_at_startup));
  }
  ~Pipeline() { shutdown(); }

  void start() {
    threads_.emplace_back([this] { read_loop(); });
    for (int w = 0; w < opt_.workers; ++w) threads_.emplace_back([this, w] { work_loop(w); });
  }

  // The vocabulary size, eod id and (conversations) the template markers it tokenizes as text, from
  // the first tokenizer built (so that the calling thread does not spend time loading one more).
  // Rethrows a thread's error.
  void tokenizer_info(int64_t& vocab_size, int32_t& eod, std::vector<std::string>& markers_as_text) {
    std::unique_lock<std::mutex> lk(mu_);
    result_cv_.wait(lk, [&] { return error_ || info_ready_; });
    if (error_) std::rethrow_exception(error_);
    vocab_size = vocab_size_;
    eod = eod_;
    markers_as_text = markers_as_text_;
  }
  // With --image-key, the placeholder's id (valid after tokenizer_info).
  int32_t image_token_id() const { return image_token_id_; }

  // Next result in input order; false when the input is exhausted. Rethrows a thread's error.
  bool next(int64_t id, ChunkResult& out) {
    std::unique_lock<std::mutex> lk(mu_);
    result_cv_.wait(lk, [&] { return error_ || results_.count(id) || (reader_done_ && id >= chunks_read_); });
    if (error_) std::rethrow_exception(error_);
    auto it = results_.find(id);
    if (it == results_.end()) return false;
    out = std::move(it->second);
    results_.erase(it);
    written_ = id + 1;
    space_cv_.notify_one();  // the reader may read ahead again
    return true;
  }

  // When every worker had a tokenizer (valid after shutdown()).
  double startup_seconds() const { return startup_seconds_; }

  void shutdown() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    notify_everyone();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

 private:
  void notify_everyone() {
    space_cv_.notify_all();
    work_cv_.notify_all();
    result_cv_.notify_all();
  }

  void set_error() {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error_) error_ = std::current_exception();
    notify_everyone();
  }

  void read_loop() {
    try {
      for (int64_t id = 0;; ++id) {
        {
          // Bound the memory: at most max_in_flight_ chunks read but not yet written (more while the
          // tokenizer loads, so that waiting workers have lines to parse).
          std::unique_lock<std::mutex> lk(mu_);
          space_cv_.wait(lk, [&] {
            return stop_ || id - written_ < (tokenizers_ready_ ? max_in_flight_ : max_in_flight_at_startup_);
          });
          if (stop_) return;
        }
        auto chunk = std::make_unique<LineChunk>();
        const bool more = reader_.next_chunk(*chunk, opt_.chunk_bytes);
        std::lock_guard<std::mutex> lk(mu_);
        if (!more) {
          reader_done_ = true;
          notify_everyone();
          return;
        }
        queue_.emplace_back(id, std::move(chunk));
        chunks_read_ = id + 1;
        work_cv_.notify_one();
      }
    } catch (...) {
      set_error();
    }
  }

  // The next chunk to tokenize, parsed: one parsed early if any, else the next one read. False when
  // the input is exhausted (or on stop or error).
  bool next_parsed(ParsedChunk& out) {
    std::pair<int64_t, std::unique_ptr<LineChunk>> job;
    {
      std::unique_lock<std::mutex> lk(mu_);
      work_cv_.wait(lk, [&] { return stop_ || error_ || !parsed_.empty() || !queue_.empty() || reader_done_; });
      if (stop_ || error_) return false;
      if (!parsed_.empty()) {
        out = std::move(parsed_.front());
        parsed_.pop_front();
        return true;
      }
      if (queue_.empty()) return false;  // reader_done_ and nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    parse_chunk(job.first, *job.second, opt_, chat_, out);
    return true;
  }

  // While worker 0 builds the shared tokenizer, the others parse the JSON of chunks read meanwhile
  // (which needs no tokenizer), so that this work is off the critical path instead of them idling.
  // The parsed chunks go to parsed_ in input order, for any worker to tokenize.
  void parse_until_ready() {
    for (;;) {
      std::pair<int64_t, std::unique_ptr<LineChunk>> job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        work_cv_.wait(lk, [&] { return stop_ || error_ || tokenizers_ready_ || !queue_.empty() || reader_done_; });
        if (stop_ || error_ || tokenizers_ready_ || queue_.empty()) return;
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      ParsedChunk p;
      parse_chunk(job.first, *job.second, opt_, chat_, p);
      std::lock_guard<std::mutex> lk(mu_);
      // Several parsers finish out of order; keep parsed_ sorted so the writer's next chunk comes first.
      auto at = parsed_.end();
      while (at != parsed_.begin() && std::prev(at)->id > p.id) --at;
      parsed_.insert(at, std::move(p));
      work_cv_.notify_one();
    }
  }

  // Records the first tokenizer's vocabulary and counts the worker as ready.
  void tokenizer_built(const Tokenizer& tok, int ready_workers) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!info_ready_) {
      vocab_size_ = tok.vocab_size();
      eod_ = tok.eod();
      if (chat_) markers_as_text_ = ChatEncoder(*chat_, tok).markers_as_text();
      if (images_) image_token_id_ = tok.token_to_id(opt_.image_token);
      info_ready_ = true;
    }
    loaded_ += ready_workers;
    if (loaded_ == opt_.workers) {
      startup_seconds_ = timer_.seconds();
      tokenizers_ready_ = true;
    }
    notify_everyone();
  }

  void work_loop(int worker) {
    try {
      std::unique_ptr<Tokenizer> own;
      const Tokenizer* tok = nullptr;
      if (!share_) {
        own = make_tokenizer(opt_.tokenizer);
        tok = own.get();
        tokenizer_built(*tok, 1);
      } else if (worker == 0) {
        // Two load threads when there are two workers or more: the pool's second thread would otherwise
        // wait for the tokenizer once it has parsed the JSON read so far.
        shared_ = make_tokenizer(opt_.tokenizer, std::min(opt_.workers, 2));  // read by the others after the notify
        tok = shared_.get();
        tokenizer_built(*tok, opt_.workers);
      } else {
        parse_until_ready();
        std::unique_lock<std::mutex> lk(mu_);
        work_cv_.wait(lk, [&] { return stop_ || error_ || tokenizers_ready_; });
        if (stop_ || error_) return;
        tok = shared_.get();
      }
      // The image placeholder is one token whatever the tokenizer: its text is cut out before encoding.
      std::optional<MarkerSplitTokenizer> split;
      WorkerImages img;
      if (images_) {
        img = {images_, tok->token_to_id(opt_.image_token)};
        split.emplace(*tok, opt_.image_token, img.token_id);
        tok = &*split;
      }
      std::optional<ChatEncoder> enc;
      if (chat_) enc.emplace(*chat_, *tok);
      for (;;) {
        ParsedChunk p;
        if (!next_parsed(p)) return;
        ChunkResult r;
        tokenize_chunk(p, opt_, *tok, enc ? &*enc : nullptr, img, r);
        std::lock_guard<std::mutex> lk(mu_);
        results_.emplace(p.id, std::move(r));
        if (p.id == written_) result_cv_.notify_one();  // the writer waits for no other
      }
    } catch (...) {
      set_error();
    }
  }

  static constexpr size_t kReadAheadAtStartup = size_t{16} << 20;  // bytes read ahead while the tokenizer loads

  const PreprocessOptions& opt_;
  const std::optional<ChatTemplate> chat_;
  const ImageStep* images_;
  const Timer& timer_;
  JsonlReader reader_;
  const bool share_;                  // one tokenizer for all workers
  std::unique_ptr<Tokenizer> shared_;  // built by worker 0 when share_
  std::vector<std::thread> threads_;
  std::mutex mu_;
  // Three condition variables (one per kind of waiter) so that a notification wakes only threads
  // that can act on it: on 2 cores, needless wake-ups of the reader and writer take time from workers.
  std::condition_variable space_cv_;   // the reader: room to read ahead
  std::condition_variable work_cv_;    // the workers: a chunk to parse or tokenize, the tokenizer ready
  std::condition_variable result_cv_;  // the writer: the next result, the tokenizer's info
  std::deque<std::pair<int64_t, std::unique_ptr<LineChunk>>> queue_;  // read, not yet parsed
  std::deque<ParsedChunk> parsed_;  // parsed while the tokenizer loaded, by id
  std::map<int64_t, ChunkResult> results_;
  int64_t chunks_read_ = 0, written_ = 0, max_in_flight_ = 8, max_in_flight_at_startup_ = 8;
  bool reader_done_ = false, stop_ = false, info_ready_ = false, tokenizers_ready_ = false;
  int64_t vocab_size_ = 0;
  int32_t eod_ = -1;
  int32_t image_token_id_ = -1;
  std::vector<std::string> markers_as_text_;
  int loaded_ = 0;
  double startup_seconds_ = 0;
  std::exception_ptr error_;
};

// The sidecar beside <prefix>_<key>_document.{bin,idx}: the tokenizer that made the ids.
std::string sidecar_text(const PreprocessOptions& o, size_t key, int64_t vocab, int32_t eod, IndexDType dtype,
                         const std::optional<ChatTemplate>& chat, int32_t image_token_id) {
  nlohmann::json j = o.tokenizer.to_json();
  j["vocab_size"] = vocab;
  j["eod"] = eod;
  j["dtype"] = index_dtype_name(dtype);
  j["json_key"] = o.json_keys[key];
  j["append_eod"] = o.append_eod;
  if (o.split_sentences) j["split_sentences"] = true;
  if (chat) {
    j["chat_template"] = chat_template_name(*chat);
    j["loss_mask"] = true;
  }
  if (!o.image_key.empty()) {
    // Beside the token data: the name only, so that the data can move.
    j["image_data"] = std::filesystem::path(image_data_prefix(o.output_prefix, o.image_key)).filename().string();
    j["image_token_id"] = image_token_id;
  }
  return j.dump(2) + "\n";
}

// The template of conversation input, or none for text input; throws Error on a bad --chat-template
// or on --json-keys given with it.
std::optional<ChatTemplate> chat_template_of(const PreprocessOptions& opt) {
  if (opt.chat_template.empty()) return std::nullopt;
  MEGADLM_CHECK(opt.json_keys == std::vector<std::string>{"text"}, "--json-keys does not apply with --chat-template ",
                "(a conversation is read from 'messages', or 'prompt' and 'response')");
  MEGADLM_CHECK(!opt.split_sentences, "--split-sentences does not apply with --chat-template ",
                "(a conversation is one sequence with its loss mask)");
  return resolve_chat_template(opt.chat_template);
}

// Appends the chunk's documents to `w`: `values` (tokens or their loss mask) cut as pk's lengths say.
void write_documents(IndexedDatasetWriter& w, const std::vector<int32_t>& values, const ChunkResult::PerKey& pk) {
  const int32_t* t = values.data();
  const int32_t* l = pk.seq_lengths.data();
  for (int32_t seqs : pk.seqs_per_doc) {
    int64_t n = 0;
    for (int32_t s = 0; s < seqs; ++s) n += l[s];
    w.add_document(t, n, l, seqs);
    t += n;
    l += seqs;
  }
}

// Appends the chunk's image documents to `w`: each document's images, H * W * 3 values each.
void write_images(IndexedDatasetWriter& w, const ChunkResult& r, int64_t values_per_image) {
  const uint8_t* p = r.pixels.data();
  std::vector<int32_t> values, lengths;
  for (int32_t n : r.images_per_doc) {
    values.assign(p, p + n * values_per_image);
    lengths.assign(static_cast<size_t>(n), static_cast<int32_t>(values_per_image));
    w.add_document(values.data(), n * values_per_image, lengths.data(), n);
    p += n * values_per_image;
  }
}

// What --image-key asks of each line's images; throws Error naming the flag at fault.
ImageStep image_step_of(const PreprocessOptions& opt, bool chat) {
  MEGADLM_CHECK(!opt.split_sentences, "--image-key does not apply with --split-sentences");
  MEGADLM_CHECK(chat || opt.json_keys.size() == 1, "--image-key takes one text key; --json-keys gives ",
                opt.json_keys.size());
  MEGADLM_CHECK(!opt.image_token.empty(), "--image-token is empty");
  ImageStep st;
  st.processor = image_processor_of(opt.image_processor, resize_rounding_from_name(opt.image_rounding, "--image-rounding"));
  MEGADLM_CHECK(fixed_image_size(st.processor)[0] > 0, "--image-processor ", opt.image_processor,
                ": stored images need one size: a processor with do_center_crop, or a resize to a fixed height and width");
  if (opt.image_folder.empty()) {
    st.folder = std::filesystem::path(opt.input).parent_path().string();
  } else {
    MEGADLM_CHECK(std::filesystem::is_directory(opt.image_folder), "--image-folder ", opt.image_folder, " is not a folder");
    st.folder = opt.image_folder;
  }
  st.token = opt.image_token;
  return st;
}

std::string absolute_or_empty(const std::string& p) {
  if (p.empty()) return p;
  std::error_code ec;
  const auto a = std::filesystem::absolute(p, ec);
  return ec ? p : a.lexically_normal().string();
}

}  // namespace

PreprocessResult preprocess_jsonl(const PreprocessOptions& opt) {
  MEGADLM_CHECK(!opt.input.empty(), "--input is required");
  MEGADLM_CHECK(!opt.output_prefix.empty(), "--output-prefix is required");
  MEGADLM_CHECK(!opt.json_keys.empty(), "--json-keys needs at least one key");
  MEGADLM_CHECK(opt.workers >= 1 && opt.workers <= 1024, "--workers ", opt.workers, " must be in [1, 1024]");
  MEGADLM_CHECK(opt.log_interval >= 0, "--log-interval ", opt.log_interval, " is negative");
  MEGADLM_CHECK(!opt.keep_newlines || opt.split_sentences, "--keep-newlines needs --split-sentences");
  for (size_t a = 0; a < opt.json_keys.size(); ++a)
    for (size_t b = a + 1; b < opt.json_keys.size(); ++b)
      MEGADLM_CHECK(opt.json_keys[a] != opt.json_keys[b], "--json-keys lists '", opt.json_keys[a], "' twice");
  const std::optional<ChatTemplate> chat = chat_template_of(opt);
  std::optional<ImageStep> image_step;
  if (!opt.image_key.empty()) image_step = image_step_of(opt, chat.has_value());
  const Timer timer;

  // The tokenizer as the sidecar will describe it (paths made absolute so training can run elsewhere).
  PreprocessOptions o = opt;
  o.tokenizer.vocab_file = absolute_or_empty(o.tokenizer.vocab_file);
  o.tokenizer.merge_file = absolute_or_empty(o.tokenizer.merge_file);
  o.tokenizer.tokenizer_model = absolute_or_empty(o.tokenizer.tokenizer_model);
  if (chat) o.json_keys = {kConversationKey};
  // The image placeholder is an added special token (its id in the tokenizer the sidecar describes).
  auto& added = o.tokenizer.added_special_tokens;
  if (image_step && std::find(added.begin(), added.end(), o.image_token) == added.end()) added.push_back(o.image_token);
  Pipeline pipe(o, chat, image_step ? &*image_step : nullptr, timer);
  pipe.start();
  int64_t vocab = 0;
  int32_t eod = -1;
  PreprocessResult res;
  pipe.tokenizer_info(vocab, eod, res.markers_as_text);
  const IndexDType dtype = optimal_index_dtype(vocab);

  res.tokens.assign(o.json_keys.size(), 0);
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const std::string& key : o.json_keys) {
    res.output_prefixes.push_back(o.split_sentences ? sentence_prefix(o.output_prefix, key)
                                                    : document_prefix(o.output_prefix, key));
    writers.push_back(std::make_unique<IndexedDatasetWriter>(res.output_prefixes.back(), dtype));
  }
  // Conversations: the loss mask, one uint8 per token, beside the tokens.
  std::unique_ptr<IndexedDatasetWriter> mask_writer;
  if (chat) mask_writer = std::make_unique<IndexedDatasetWriter>(loss_mask_prefix(res.output_prefixes[0]), IndexDType::U8);
  // Images: uint8 [H, W, 3] each, one document per line.
  std::unique_ptr<IndexedDatasetWriter> image_writer;
  int64_t values_per_image = 0;
  if (image_step) {
    res.image_prefix = image_data_prefix(o.output_prefix, o.image_key);
    image_writer = std::make_unique<IndexedDatasetWriter>(res.image_prefix, IndexDType::U8);
    const auto [H, W] = fixed_image_size(image_step->processor);
    values_per_image = H * W * 3;
    if (o.log)
      log_info("preprocess: images of key '", o.image_key, "' from ", image_step->folder.empty() ? "." : image_step->folder,
               " -> ", res.image_prefix, ".{bin,idx}, ", W, " x ", H, " each; placeholder '", o.image_token, "' id ",
               pipe.image_token_id());
  }
  if (o.log)
    log_info("preprocess: ", o.input, " -> ", o.output_prefix, "_{", [&] {
      std::string s;
      for (size_t k = 0; k < o.json_keys.size(); ++k) s += (k ? "," : "") + o.json_keys[k];
      return s;
    }(), "}_", o.split_sentences ? "sentence" : "document", ".{bin,idx}; ", o.tokenizer.type, " vocab ", vocab, ", eod ", eod, ", ", index_dtype_name(dtype),
             ", ", o.workers, " worker(s)", chat ? std::string(", chat template ") + chat_template_name(*chat) +
                                                        ", loss mask in " + loss_mask_prefix(res.output_prefixes[0]) +
                                                        ".{bin,idx}"
                                                  : std::string());
  if (o.log && !res.markers_as_text.empty()) {
    std::string list;
    for (const std::string& m : res.markers_as_text) list += (list.empty() ? "" : " ") + m;
    log_info("warning: the tokenizer has no token for the chat template's markers ", list,
             ": they are tokenized as text");
  }

  // The sidecars depend only on the tokenizer: they are written and synced in the background while the
  // data is processed, and renamed into place with the data at the end.
  std::vector<std::unique_ptr<StagedFile>> sidecars(o.json_keys.size());
  std::thread sidecar_writer([&] {
    for (size_t k = 0; k < o.json_keys.size(); ++k) {
      const std::string text = sidecar_text(o, k, vocab, eod, dtype, chat, pipe.image_token_id());
      try {
        sidecars[k] = std::make_unique<StagedFile>(sidecar_path(res.output_prefixes[k]), text.data(), text.size());
      } catch (...) {
        return;  // reported below: the final pass writes it again and fails with the error
      }
    }
  });
  struct Joiner {
    std::thread& t;
    ~Joiner() {
      if (t.joinable()) t.join();
    }
  } joiner{sidecar_writer};

  ChunkResult r;
  int64_t next_log = o.log_interval > 0 ? o.log_interval : -1;
  for (int64_t id = 0; pipe.next(id, r); ++id) {
    for (const BadLine& b : r.bad) {
      if (o.strict) fail(o.input, ":", b.line, ": ", b.reason, " (--strict: stopping; no output written)");
      if (o.log && res.bad_lines < o.max_bad_lines_kept)
        log_info(o.input, ":", b.line, ": ", b.reason, " (line skipped)");
      if (static_cast<int64_t>(res.bad.size()) < o.max_bad_lines_kept) res.bad.push_back(b);
      ++res.bad_lines;
    }
    for (size_t k = 0; k < writers.size(); ++k) {
      const ChunkResult::PerKey& pk = r.keys[k];
      write_documents(*writers[k], pk.tokens, pk);
      res.tokens[k] += static_cast<int64_t>(pk.tokens.size());
    }
    if (image_writer) {
      write_images(*image_writer, r, values_per_image);
      for (int32_t n : r.images_per_doc) res.images += n;
    }
    if (mask_writer) {
      write_documents(*mask_writer, r.keys[0].mask, r.keys[0]);
      for (int32_t m : r.keys[0].mask) res.response_tokens += m;
    }
    res.lines += r.lines;
    res.documents += r.documents;
    res.blank_lines += r.blank;
    res.input_bytes += r.bytes;
    if (o.log && next_log > 0 && res.documents >= next_log) {
      const double s = std::max(timer.seconds(), 1e-9);
      log_info("Processed ", res.documents, " documents (", static_cast<int64_t>(res.documents / s), " docs/s, ",
               static_cast<double>(res.input_bytes) / s / (1 << 20), " MB/s).");
      while (next_log <= res.documents) next_log += o.log_interval;
    }
  }
  pipe.shutdown();
  if (res.bad_lines > o.max_bad_lines_kept && o.log)
    log_info("... ", res.bad_lines - o.max_bad_lines_kept, " more bad lines not shown");
  if (res.documents == 0 && o.log)
    log_info("warning: ", o.input, " has no usable documents; writing an empty dataset");

  // Outputs appear under their final names only now, each file renamed into place after it is complete;
  // one directory sync makes all the renames durable.
  sidecar_writer.join();
  // The loss mask and the images first: token data whose sidecar promises them is never there without them.
  if (mask_writer) mask_writer->finalize(/*sync_directory=*/false);
  if (image_writer) {
    const std::string text = image_step->sidecar_text(o.image_key, pipe.image_token_id());
    StagedFile image_sidecar(image_sidecar_path(res.image_prefix), text.data(), text.size());
    image_writer->finalize(/*sync_directory=*/false);
    image_sidecar.commit();
  }
  for (size_t k = 0; k < writers.size(); ++k) {
    writers[k]->finalize(/*sync_directory=*/false);
    if (!sidecars[k]) {  // the background write failed: once more here, to report why
      const std::string text = sidecar_text(o, k, vocab, eod, dtype, chat, pipe.image_token_id());
      sidecars[k] = std::make_unique<StagedFile>(sidecar_path(res.output_prefixes[k]), text.data(), text.size());
    }
    sidecars[k]->commit();
  }
  if (!writers.empty()) sync_directory_of(res.output_prefixes.front());
  res.seconds = timer.seconds();
  res.startup_seconds = pipe.startup_seconds();
  if (o.log) {
    const double s = std::max(res.seconds, 1e-9);
    std::string toks;
    for (size_t k = 0; k < o.json_keys.size(); ++k)
      toks += (k ? ", " : "") + o.json_keys[k] + ": " + std::to_string(res.tokens[k]);
    if (chat) toks += " (" + std::to_string(res.response_tokens) + " in responses)";
    if (image_step) toks += "; " + std::to_string(res.images) + " images";
    log_info("Done: ", res.documents, " documents, tokens {", toks, "}, ", res.lines, " lines, ", res.bad_lines,
             " bad lines skipped, ", res.blank_lines, " blank lines; ", res.seconds, " s (",
             static_cast<int64_t>(res.documents / s), " docs/s, ", static_cast<double>(res.input_bytes) / s / (1 << 20),
             " MB/s); tokenizer start-up ", res.startup_seconds, " s, then ",
             static_cast<double>(res.input_bytes) / std::max(res.seconds - res.startup_seconds, 1e-9) / (1 << 20),
             " MB/s");
  }
  return res;
}

DataSidecar read_data_sidecar(const std::string& data_prefix) {
  const std::string path = sidecar_path(data_prefix);
  MEGADLM_CHECK(std::filesystem::exists(path), path, ": cannot open the tokenizer sidecar (was the data made by preprocess_data?)");
  std::ifstream in = open_input_file(path, "tokenizer sidecar");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": invalid JSON (", e.what(), ")");
  }
  MEGADLM_CHECK(j.is_object(), path, ": not a JSON object");
  DataSidecar s;
  try {
    MEGADLM_CHECK(j.contains("vocab_size") && j["vocab_size"].is_number_integer(), path, ": missing integer 'vocab_size'");
    MEGADLM_CHECK(j.contains("eod") && j["eod"].is_number_integer(), path, ": missing integer 'eod'");
    s.vocab_size = j["vocab_size"].get<int64_t>();
    s.eod = j["eod"].get<int32_t>();
    if (const auto it = j.find("chat_template"); it != j.end()) {
      MEGADLM_CHECK(it->is_string(), "'chat_template' is not a string");  // the catch names the path
      s.chat_template = it->get<std::string>();
    }
    if (const auto it = j.find("loss_mask"); it != j.end()) {
      MEGADLM_CHECK(it->is_boolean(), "'loss_mask' is not a boolean");
      s.loss_mask = it->get<bool>();
    }
    if (const auto it = j.find("image_data"); it != j.end()) {
      MEGADLM_CHECK(it->is_string(), "'image_data' is not a string");
      MEGADLM_CHECK(j.contains("image_token_id") && j["image_token_id"].is_number_integer(),
                    "'image_data' without an integer 'image_token_id'");
      s.image_data = it->get<std::string>();
      s.image_token = j["image_token_id"].get<int32_t>();
    }
    for (const char* k : kSidecarExtraKeys) j.erase(k);
    s.spec = TokenizerSpec::from_json(j);
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": ", e.what());
  }
  return s;
}

namespace {

// Specs naming the same files (or the same built-in tokenizer) describe the same base vocabulary.
bool same_files(const TokenizerSpec& a, const TokenizerSpec& b) {
  return a.type == b.type && a.vocab_file == b.vocab_file && a.merge_file == b.merge_file &&
         a.tokenizer_model == b.tokenizer_model && a.null_vocab_size == b.null_vocab_size;
}

// The first id below `n` that the two tokenizers decode differently; -1 when none.
int64_t first_differing_id(const Tokenizer& a, const Tokenizer& b, int64_t n) {
  for (int64_t id = 0; id < n; ++id) {
    const int32_t i = static_cast<int32_t>(id);
    if (a.decode(&i, 1) != b.decode(&i, 1)) return id;
  }
  return -1;
}

}  // namespace

void check_data_tokenizer(const std::string& data_prefix, const Tokenizer& tok, const std::string& whose) {
  const std::string path = sidecar_path(data_prefix);
  if (!std::filesystem::exists(path)) return;
  const DataSidecar s = read_data_sidecar(data_prefix);
  const std::string mismatch = data_prefix + ": the data was made with another tokenizer than that of " + whose + ": " +
                               path + " records " + s.spec.type + " (vocabulary " + std::to_string(s.vocab_size) +
                               ", end-of-document id " + std::to_string(s.eod) + "), " + whose + " has " +
                               tok.spec().type + " (vocabulary " + std::to_string(tok.vocab_size()) +
                               ", end-of-document id " + std::to_string(tok.eod()) + ")";
  MEGADLM_CHECK(s.eod == tok.eod() && s.vocab_size <= tok.vocab_size(), mismatch);
  if (same_files(s.spec, tok.spec())) return;
  std::unique_ptr<Tokenizer> data_tok;
  try {
    data_tok = make_tokenizer(s.spec);
  } catch (const Error&) {
    return;  // the sidecar's files moved: the recorded sizes and ids above are all that can be compared
  }
  const int64_t id = first_differing_id(*data_tok, tok, s.vocab_size);
  if (id < 0) return;
  const int32_t i = static_cast<int32_t>(id);
  fail(mismatch, "; token id ", id, " is '", data_tok->decode(&i, 1), "' in the data's tokenizer and '",
       tok.decode(&i, 1), "' in that of ", whose);
}

}  // namespace megadlm
