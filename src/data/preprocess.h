#pragma once
// The core of preprocess_data: .jsonl (or .jsonl.gz) -> Megatron MMIDIDX token data, one dataset per
// JSON key, named <output_prefix>_<key>_document.{bin,idx} as Megatron's tools/preprocess_data.py
// names them, plus a sidecar <output_prefix>_<key>_document.tokenizer.json that records the
// tokenizer (its TokenizerSpec, vocab_size and eod) so training finds it without flags.
//
// Per line, as Megatron: each key's text (or each string of a list, Megatron's "sentences") is
// tokenized; a non-empty text becomes one sequence; --append-eod appends the eod id to the
// document's last sequence; an empty text gives a document with no sequence.
//
// --split-sentences (split_sentences, for BERT and T5 data): each text is first split into sentences
// (data/sentence_split.h; --keep-newlines keeps the whitespace after each sentence), each sentence
// whose tokens are not empty one sequence of the document, and the datasets are named
// <output_prefix>_<key>_sentence as Megatron names them. The sidecar records "split_sentences": true.
//
// Bad lines (invalid UTF-8, invalid JSON, not an object, missing key, non-string value) are reported
// with their line number and skipped, all keys together so that the datasets stay aligned; with
// strict they stop the run with an Error and nothing is left under the final names. Blank lines are
// skipped silently (counted). An empty input gives a valid empty dataset (0 documents) and a warning.
//
// Images (--image-key, data/image_data.h): each line's images are decoded and resized and cropped by
// the workers, and written, one document per line (none for a text-only line), to
// <output_prefix>_<image_key>_pixels.{bin,idx} with its .image.json sidecar; the token sidecar names it
// ("image_data", "image_token_id"). A missing, unreadable or damaged image, or a line whose placeholders
// and images differ in number, is a bad line.
//
// Conversations (--chat-template, data/chat_template.h): each line is a conversation ("messages", or
// "prompt" + "response") rendered with the template and tokenized piecewise (a loss-mask boundary is a
// token boundary) into one document of one sequence in <output_prefix>_conversation_document.{bin,idx},
// with its loss mask (uint8, 1 = response; the eod of --append-eod is response) in the dataset
// loss_mask_prefix() of it, <output_prefix>_conversation_document.loss_mask.{bin,idx}, of the same
// sequence and document lengths. The sidecar records "chat_template" (its name) and "loss_mask": true.
// A line whose conversation the template cannot render is a bad line like the others.
//
// Threads: a reader thread cuts the input into chunks of whole lines, `workers` threads parse and
// tokenize chunks, and the calling thread writes the results in input order, so the output is
// byte-identical for any number of workers. A tokenizer whose encode() is thread-safe (GPT-2 and
// HuggingFace byte-level BPE) is built once, by worker 0, while the other workers parse the JSON of the
// first chunks, and then shared; other tokenizers are built by each worker.
#include <cstdint>
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "tokenizers/tokenizer.h"

namespace megadlm {

struct PreprocessOptions {
  std::string input;
  std::vector<std::string> json_keys{"text"};
  std::string output_prefix;
  bool append_eod = false;
  int workers = 1;
  TokenizerSpec tokenizer;
  bool strict = false;
  int64_t log_interval = 1000;         // documents between progress lines; 0 = none
  bool log = true;                     // progress, bad-line and summary lines on stderr
  size_t chunk_bytes = size_t(1) << 16;  // input handed to a worker at a time (small: even load at the end)
  int64_t max_bad_lines_kept = 1000;   // bad lines listed in the result (all are counted)
  // A built-in template's name (chatml, llama3, qwen) or a tokenizer_config.json naming one: the input
  // is conversations and json_keys must stay {"text"}. Empty: text data.
  std::string chat_template;
  bool split_sentences = false;  // one sequence per sentence; datasets named <prefix>_<key>_sentence
  bool keep_newlines = false;    // with split_sentences: a sentence keeps the whitespace after it
  // Images (vision-language data, data/image_data.h): the key of each line's image path, or list of
  // paths ("" : no images). The text (or conversation) marks where each image goes with image_token,
  // which becomes one added special token; each line needs as many placeholders as images.
  std::string image_key;
  std::string image_folder;     // relative image paths start here ("" : the input file's folder)
  std::string image_processor;  // a preprocessor_config.json or a folder with one ("" : CLIP's 224 defaults)
  std::string image_token = "<image>";
  std::string image_rounding = "torchvision";  // the resize's rounding: torchvision or pil
};

struct BadLine {
  int64_t line = 0;  // 1-based
  std::string reason;
};

struct PreprocessResult {
  int64_t lines = 0;        // lines read (including bad and blank ones)
  int64_t documents = 0;    // lines written as documents
  int64_t bad_lines = 0;
  int64_t blank_lines = 0;
  int64_t input_bytes = 0;  // uncompressed
  std::vector<int64_t> tokens;  // per key
  std::vector<BadLine> bad;     // the first max_bad_lines_kept bad lines
  std::vector<std::string> output_prefixes;  // per key: <output_prefix>_<key>_document (or _sentence)
  int64_t response_tokens = 0;               // conversations: tokens whose loss mask is 1
  std::vector<std::string> markers_as_text;  // conversations: template markers the tokenizer lacks
  double seconds = 0;          // the whole run
  double startup_seconds = 0;  // until every worker had a tokenizer (shared ones are built once)
  int64_t images = 0;          // with image_key: images stored
  std::string image_prefix;    // with image_key: <output_prefix>_<image_key>_pixels
};

// Runs the whole conversion; throws Error naming the file, line or flag at fault.
PreprocessResult preprocess_jsonl(const PreprocessOptions& options);

// The dataset key of conversation data: <output_prefix>_conversation_document.
inline constexpr const char* kConversationKey = "conversation";

// "<output_prefix>_<key>_document", the dataset prefix Megatron's tool writes for a key.
std::string document_prefix(const std::string& output_prefix, const std::string& key);
// "<output_prefix>_<key>_sentence", the prefix it writes for a key with --split-sentences.
std::string sentence_prefix(const std::string& output_prefix, const std::string& key);

// The sidecar beside a dataset: <data_prefix>.tokenizer.json.
std::string sidecar_path(const std::string& data_prefix);
struct DataSidecar {
  TokenizerSpec spec;
  int64_t vocab_size = 0;
  int32_t eod = -1;
  std::string chat_template;  // conversation data: the template's name ("" for text data)
  bool loss_mask = false;     // a loss-mask dataset lies beside it (loss_mask_prefix, data/loss_mask.h)
  std::string image_data;     // image data (data/image_data.h): its prefix's name, in the data's folder; else ""
  int32_t image_token = -1;   // image data: the placeholder's id
};
// Reads the sidecar of a dataset; throws Error naming the file when it is absent or malformed.
DataSidecar read_data_sidecar(const std::string& data_prefix);

// Refuses data tokenized with another tokenizer than `tok` (a checkpoint's, described as `whose`):
// an Error naming the data prefix, its sidecar and `whose` when the end-of-document ids differ, the
// data's vocabulary is larger, or (when the sidecar's tokenizer files can still be read) a token id
// of the data's vocabulary decodes differently. `tok` may have added tokens beyond the data's
// vocabulary (a diffusion model's mask token). Data without a sidecar passes unchecked.
void check_data_tokenizer(const std::string& data_prefix, const Tokenizer& tok, const std::string& whose);

}  // namespace megadlm
