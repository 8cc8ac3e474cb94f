#include "train/data_setup.h"

#include <cmath>
#include <filesystem>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/log.h"
#include "data/blended_dataset.h"
#include "data/gpt_dataset.h"
#include "data/llava_dataset.h"
#include "data/preprocess.h"
#include "objectives/block_diffusion.h"
#include "objectives/masked_diffusion.h"
#include "objectives/next_token.h"

namespace megadlm {

std::unique_ptr<Objective> make_objective(const TrainArgs& args) {
  if (args.model.block_diffusion) {
    BlockDiffusionOptions o;
    o.seed = args.diffusion.seed;
    o.mask_token = args.diffusion.mask_token;
    o.block_length = args.model.attention_block_size;
    o.clip_min = args.bd3_clip_min;
    o.clip_max = args.bd3_clip_max;
    o.eps = args.diffusion.eps;
    return std::make_unique<BlockDiffusion>(o);
  }
  if (args.model_type == ModelType::DiffLM) return std::make_unique<MaskedDiffusion>(args.diffusion);
  NextTokenOptions o;
  o.eod = args.diffusion.eod;
  o.reset_position_ids = args.reset_position_ids;
  o.reset_attention_mask = args.reset_attention_mask;
  o.eod_mask_loss = args.eod_mask_loss;
  return std::make_unique<NextToken>(o);
}

TokenizerSpec resolve_tokenizer_spec(const TrainArgs& a) {
  if (!a.tokenizer_type.empty()) {
    TokenizerSpec s;
    s.type = a.tokenizer_type;
    s.vocab_file = a.vocab_file;
    s.merge_file = a.merge_file;
    s.tokenizer_model = a.tokenizer_model;
    s.null_vocab_size = a.null_vocab_size;
    return s;
  }
  const std::vector<std::string>& paths = a.data_path.empty() ? a.train_data_path : a.data_path;
  const DataBlend blend = parse_data_path(paths);
  const std::string sidecar = blend.prefixes.at(0) + ".tokenizer.json";
  MEGADLM_CHECK(std::filesystem::exists(sidecar), "no --tokenizer-type given and no tokenizer recorded beside the data (",
                sidecar, " is missing): pass --tokenizer-type and its files");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file(sidecar));
  } catch (const nlohmann::json::exception& e) {
    fail(sidecar, ": not valid JSON (", e.what(), ")");
  }
  return TokenizerSpec::from_json(j.contains("tokenizer") ? j["tokenizer"] : j);
}

int32_t resolve_mask_token(const std::string& flag, Tokenizer& tok) {
  if (!flag.empty()) {
    char* end = nullptr;
    const long v = std::strtol(flag.c_str(), &end, 10);
    if (end && *end == '\0') {
      MEGADLM_CHECK(v >= 0 && v < tok.vocab_size(), "--mask-token ", flag, " is outside the tokenizer's vocabulary [0, ",
                    tok.vocab_size(), ")");
      return static_cast<int32_t>(v);
    }
    const int32_t id = tok.token_to_id(flag);
    return id >= 0 ? id : tok.add_special_token(flag);
  }
  for (const char* name : {"<|mask|>", "<mask>", "[MASK]", "<|mdm_mask|>"}) {
    const int32_t id = tok.token_to_id(name);
    if (id >= 0) return id;
  }
  return tok.add_special_token("<|mask|>");
}

int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by) {
  return (vocab + divisible_by - 1) / divisible_by * divisible_by;
}

void check_data_tokenizers(const TrainArgs& a, const Tokenizer& tok) {
  for (const auto* paths : {&a.data_path, &a.train_data_path, &a.valid_data_path, &a.test_data_path})
    if (!paths->empty())
      for (const std::string& prefix : parse_data_path(*paths).prefixes)
        check_data_tokenizer(prefix, tok, "this run (--tokenizer-type and its files)");
}

namespace {

std::string cache_dir_for(const TrainArgs& a, const std::string& prefix) {
  if (!a.data_cache_path.empty()) return a.data_cache_path;
  return std::filesystem::path(prefix).parent_path().string() + "/cache";
}

GPTDatasetConfig gpt_config(const TrainArgs& a, const DataBlend& blend) {
  GPTDatasetConfig c;
  c.seq_length = a.seq_length;
  c.seed = a.seed;
  c.cache_dir = cache_dir_for(a, blend.prefixes.at(0));
  if (a.sft) {
    c.sft = a.sft_packing ? SftLayout::Packing : SftLayout::Padding;
    // Padding eods teach a diffusion model where the answer ends (LLaDA), so they are response there;
    // an autoregressive model learns to stop from the conversation's own end-of-document token.
    c.pad_token = a.diffusion.eod;
    c.pad_loss_mask = a.model_type == ModelType::DiffLM ? 1 : 0;
  }
  return c;
}

// --model-type llava: the conversations of the split with their images (data/llava_dataset.h).
std::shared_ptr<const TokenDataset> with_images(const TrainArgs& a, const std::string& prefix,
                                                std::shared_ptr<const TokenDataset> d) {
  auto sft = std::dynamic_pointer_cast<const SftDataset>(d);
  MEGADLM_CHECK(sft != nullptr, "--model-type llava takes one data prefix of --sft conversations (no blend)");
  auto images = std::make_shared<const ImageDataset>(llava_image_prefix(prefix));
  const int64_t size = a.llava.options.clip.image_size;
  MEGADLM_CHECK(images->height() == size && images->width() == size, prefix, ": the stored images are ",
                images->height(), " x ", images->width(), " but --img-h / --img-w are ", size);
  return std::make_shared<LlavaDataset>(sft, images, a.llava.options.patches());
}

// One split of --data-path (cut by --split) or one of --train/valid/test-data-path (used whole), with
// the data library's Megatron blend; bounded by the model's vocabulary, so that a token beyond it is an
// Error naming the .bin. No samples wanted: no dataset.
std::shared_ptr<const TokenDataset> build_split(const TrainArgs& a, const std::vector<std::string>& paths, Split split,
                                                int64_t samples, bool whole) {
  if (samples <= 0) return nullptr;
  const DataBlend blend = parse_data_path(paths);
  std::shared_ptr<const TokenDataset> d =
      whole ? build_gpt_dataset_whole(blend, split, samples, gpt_config(a, blend), a.model.vocab_size)
            : build_gpt_split_dataset(blend, a.split, split, samples, gpt_config(a, blend), a.model.vocab_size);
  return a.llava.enabled && d ? with_images(a, blend.prefixes.at(0), d) : d;
}

}  // namespace

std::string llava_image_prefix(const std::string& data_prefix) {
  const DataSidecar side = read_data_sidecar(data_prefix);
  MEGADLM_CHECK(!side.image_data.empty() && side.image_token >= 0, sidecar_path(data_prefix),
                ": --model-type llava needs image data beside the tokens (preprocess_data --image-key); this sidecar ",
                "names none");
  return (std::filesystem::path(data_prefix).parent_path() / side.image_data).string();
}

namespace {

// --model-type llava's one data prefix.
std::string llava_data_prefix(const TrainArgs& a) {
  const std::vector<std::string>& paths = a.data_path.empty() ? a.train_data_path : a.data_path;
  const DataBlend blend = parse_data_path(paths);
  MEGADLM_CHECK(blend.prefixes.size() == 1, "--model-type llava takes one data prefix of --sft conversations (no blend)");
  return blend.prefixes[0];
}

}  // namespace

int32_t llava_image_token(const TrainArgs& a) {
  const std::string prefix = llava_data_prefix(a);
  llava_image_prefix(prefix);
  return read_data_sidecar(prefix).image_token;
}

ClipImageConfig llava_image_processor(const TrainArgs& a) {
  return ImageDataset(llava_image_prefix(llava_data_prefix(a))).processor();
}

Datasets build_datasets(const TrainArgs& a, int64_t train_samples, int64_t valid_samples, int64_t test_samples) {
  Datasets d;
  std::ostringstream desc;
  if (!a.data_path.empty()) {
    d.train = build_split(a, a.data_path, Split::Train, train_samples, false);
    d.valid = build_split(a, a.data_path, Split::Valid, valid_samples, false);
    d.test = build_split(a, a.data_path, Split::Test, test_samples, false);
    desc << parse_data_path(a.data_path).prefixes.size() << " prefix(es), split " << a.split;
  } else {
    // Separate paths: each whole dataset serves its split.
    d.train = build_split(a, a.train_data_path, Split::Train, train_samples, true);
    if (!a.valid_data_path.empty()) d.valid = build_split(a, a.valid_data_path, Split::Valid, valid_samples, true);
    if (!a.test_data_path.empty()) d.test = build_split(a, a.test_data_path, Split::Test, test_samples, true);
    desc << "separate train/valid/test paths";
  }
  if (a.sft) desc << "; --sft, " << (a.sft_packing ? "conversations packed" : "one conversation per sample, eod-padded");
  MEGADLM_CHECK(d.train != nullptr, "the training split is empty (check --data-path and --split ", a.split, ")");
  d.description = desc.str();
  return d;
}

}  // namespace megadlm
