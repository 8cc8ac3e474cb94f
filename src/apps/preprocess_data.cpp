// preprocess_data: .jsonl (or .jsonl.gz) -> Megatron MMIDIDX token data, with Megatron's flags:
//   preprocess_data --input corpus.jsonl --output-prefix data/corpus --tokenizer-type GPT2BPETokenizer
//       --vocab-file vocab.json --merge-file merges.txt --append-eod --workers 2
// writes data/corpus_text_document.{bin,idx} and data/corpus_text_document.tokenizer.json.
// With --chat-template chatml|llama3|qwen|tokenizer_config.json the input is conversations ("messages",
// or "prompt" + "response"): data/corpus_conversation_document.{bin,idx} and its loss mask
// data/corpus_conversation_document.loss_mask.{bin,idx} (docs/sft.md).
// With --split-sentences (BERT and T5 data) each sentence is a sequence and the datasets are named
// data/corpus_text_sentence.{bin,idx} (docs/bert_t5_data.md).
// With --image-key image (vision-language data, docs/llava.md) each line's images are resized and
// cropped by CLIP's image processor into data/corpus_image_pixels.{bin,idx}, and each "<image>" of the
// text is one token.
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "core/cli_flags.h"
#include "data/preprocess.h"

using namespace megadlm;

int main(int argc, char** argv) {
  try {
    CliFlags flags("preprocess_data",
                   "Tokenizes a .jsonl corpus (one JSON object per line) into Megatron .bin/.idx files.");
    flags.add_string("input", "", "input .jsonl or .jsonl.gz file", true);
    flags.add_list("json-keys", {"text"}, "keys to extract; one dataset per key");
    flags.add_string("output-prefix", "", "output path without suffix (<prefix>_<key>_document.bin/.idx)", true);
    flags.add_bool("append-eod", "append the end-of-document token to every document");
    flags.add_int("workers", 1, "tokenizer threads", at_least(1));
    flags.add_string("tokenizer-type", "", "GPT2BPETokenizer, HuggingFaceTokenizer, SentencePieceTokenizer, "
                                           "Llama2Tokenizer, NullTokenizer, ByteTokenizer", true);
    flags.add_string("vocab-file", "", "vocab.json (GPT2BPETokenizer) or vocab.txt (BertWordPieceLowerCase / BertWordPieceCase)");
    flags.add_string("merge-file", "", "merges.txt (GPT2BPETokenizer)");
    flags.add_string("tokenizer-model", "", "tokenizer.json (HuggingFace) or .model (SentencePiece)");
    flags.add_int("vocab-size", 0, "vocabulary size (NullTokenizer)", at_least(0));
    flags.add_bool("strict", "stop at the first bad line (default: report it, skip it, go on)");
    flags.add_int("log-interval", 1000, "documents between progress lines (0: none)", at_least(0));
    flags.add_string("dataset-impl", "mmap", "accepted for old Megatron scripts; only mmap exists");
    flags.add_string("chat-template", "",
                     "chatml, llama3, qwen, or a tokenizer_config.json whose chat_template is one of them: the "
                     "input is conversations; writes <prefix>_conversation_document and its .loss_mask dataset");
    flags.add_bool("split-sentences", "split each text into sentences, one sequence each, for BERT and T5 data "
                                      "(writes <prefix>_<key>_sentence.bin/.idx)");
    flags.add_bool("keep-newlines", "with --split-sentences: each sentence keeps the whitespace (newlines) after it");
    flags.add_string("image-key", "", "key of each line's image path (or list of paths): vision-language data, "
                                      "written to <prefix>_<key>_pixels.bin/.idx");
    flags.add_string("image-folder", "", "folder of relative image paths (default: the input file's folder)");
    flags.add_string("image-processor", "", "preprocessor_config.json, or a folder holding one (default: CLIP's, 224 x 224)");
    flags.add_string("image-token", "<image>", "the text that marks where an image goes; one token");
    flags.add_string("image-rounding", "torchvision",
                     "the resize's rounding: torchvision (transformers 5's CLIPImageProcessor) or pil (PIL's)");
    flags.parse(argc, argv);
    if (flags.help_requested()) {
      std::fputs(flags.help().c_str(), stdout);
      return 0;
    }
    MEGADLM_CHECK(flags.get_string("dataset-impl") == "mmap", "--dataset-impl ", flags.get_string("dataset-impl"),
                  " is not supported (only mmap)");

    PreprocessOptions o;
    o.input = flags.get_string("input");
    o.json_keys = flags.get_list("json-keys");
    o.output_prefix = flags.get_string("output-prefix");
    o.append_eod = flags.get_bool("append-eod");
    const int64_t workers = flags.get_int("workers");
    MEGADLM_CHECK(workers >= 1 && workers <= 1024, "--workers ", workers, " must be in [1, 1024]");
    o.workers = static_cast<int>(workers);
    o.tokenizer.type = flags.get_string("tokenizer-type");
    o.tokenizer.vocab_file = flags.get_string("vocab-file");
    o.tokenizer.merge_file = flags.get_string("merge-file");
    o.tokenizer.tokenizer_model = flags.get_string("tokenizer-model");
    o.tokenizer.null_vocab_size = flags.get_int("vocab-size");
    o.strict = flags.get_bool("strict");
    o.log_interval = flags.get_int("log-interval");
    o.chat_template = flags.get_string("chat-template");
    o.split_sentences = flags.get_bool("split-sentences");
    o.keep_newlines = flags.get_bool("keep-newlines");
    o.image_key = flags.get_string("image-key");
    o.image_folder = flags.get_string("image-folder");
    o.image_processor = flags.get_string("image-processor");
    o.image_token = flags.get_string("image-token");
    o.image_rounding = flags.get_string("image-rounding");
    if (o.image_key.empty())
      for (const char* f : {"image-folder", "image-processor", "image-token", "image-rounding"})
        MEGADLM_CHECK(!flags.given(f), "--", f, " needs --image-key");
    const PreprocessResult r = preprocess_jsonl(o);
    for (size_t k = 0; k < r.output_prefixes.size(); ++k)
      std::printf("%s: %lld documents, %lld tokens\n", r.output_prefixes[k].c_str(),
                  static_cast<long long>(r.documents), static_cast<long long>(r.tokens[k]));
    if (!o.chat_template.empty())
      std::printf("%s: %lld response tokens\n", loss_mask_prefix(r.output_prefixes[0]).c_str(),
                  static_cast<long long>(r.response_tokens));
    if (!o.image_key.empty())
      std::printf("%s: %lld images\n", r.image_prefix.c_str(), static_cast<long long>(r.images));
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "preprocess_data: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "preprocess_data: internal error: %s\n", e.what());
    return 2;
  }
}
