// Reading and writing HuggingFace checkpoint directories: import (read_hf_checkpoint, load_params_into)
// and export (params_to_hf, write_hf_checkpoint).
#include "checkpoint/hf_convert.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/hf_tensor_map.h"
#include "checkpoint/safetensors_sharded.h"
#include "core/dtype.h"
#include "core/error.h"
#include "models/gpt_spec.h"

namespace megadlm {

namespace fs = std::filesystem;

const char* const kHfTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                         "vocab.json", "merges.txt", "tokenizer.model", "generation_config.json",
                                         nullptr};

namespace {

using nlohmann::json;

// Our parameter names and shapes for a config, from a model built without allocating values twice.
std::vector<std::pair<std::string, Shape>> our_shapes(const TransformerConfig& c, bool diffusion) {
  // Building the ParamStore registers every name and shape; the buffers are needed anyway later.
  TransformerConfig cc = c;
  (void)diffusion;
  cc.attention_mask = MaskType::Causal;
  LanguageModel m(cc, gpt_model_spec(cc), ParallelContext::single());
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& p : m.params().infos()) out.emplace_back(p.name, p.shape);
  return out;
}

// The HF shape of `hf` implied by the pieces that reference it: rows x cols (transposed when stored
// as Conv1D), or 1-D for biases and norms.
struct HfShape {
  int64_t rows = 0, cols = 0;
  bool transpose = false, one_d = false;
};

}  // namespace

std::vector<SafetensorsEntry> read_hf_language_params(const ShardedSafetensors& st, const HfModelInfo& info,
                                                     const std::function<std::string(const std::string&)>& hf_name,
                                                     std::set<std::string>& used) {
  const std::string& dir = st.dir();
  std::vector<SafetensorsEntry> params;
  std::map<std::string, std::pair<int64_t, int64_t>> rows_taken;  // HF tensor -> (rows the pieces read, its rows)
  for (const auto& [name, shape] : our_shapes(info.config, info.diffusion)) {
    const std::vector<Piece> pieces = pieces_for(info.layout, info.config, name, shape[0]);
    Tensor out = Tensor::empty(shape, DType::F32);
    const int64_t K = shape.n == 1 ? 1 : shape.numel() / shape[0];
    float* o = out.data<float>();
    int64_t row = 0;
    for (const Piece& p0 : pieces) {
      Piece p = p0;
      p.hf = hf_name(p0.hf);
      MEGADLM_CHECK(st.has(p.hf), dir, ": tensor '", p.hf, "' (for our ", name, ") is missing");
      const Tensor t = st.get(p.hf);
      const int64_t t_rows = t.dim() == 1 ? t.numel() : (p.transpose ? t.size(1) : t.size(0));
      const int64_t t_cols = t.dim() == 1 ? 1 : (p.transpose ? t.size(0) : t.size(1));
      MEGADLM_CHECK(t.dim() <= 2 && t_cols == K && p.row0 + p.rows <= t_rows, dir, ": tensor '", p.hf, "' has shape ",
                    t.shape().str(), ", which does not fit our ", name, " ", shape.str());
      for (int64_t r = 0; r < p.rows; ++r)
        for (int64_t k = 0; k < K; ++k) o[(row + r) * K + k] = hf_at(t, p.transpose, p.row0 + r, k, K);
      row += p.rows;
      auto& [taken, total] = rows_taken[p.hf];
      taken += p.rows;
      total = t_rows;
    }
    MEGADLM_CHECK(row == shape[0], dir, ": the pieces of ", name, " give ", row, " rows, not ", shape[0]);
    params.push_back({name, out});
  }
  // Every row of a tensor is read exactly once: a tensor larger than config.json implies (a larger
  // vocabulary, wider MLP, more heads) is an error, not a silent truncation.
  for (const auto& [hf, rows] : rows_taken) {
    MEGADLM_CHECK(rows.first == rows.second, dir, ": tensor '", hf, "' has ", rows.second, " rows but config.json implies ",
                  rows.first);
    used.insert(hf);
  }
  return params;
}

HfCheckpoint read_hf_checkpoint(const std::string& dir) {
  HfCheckpoint ck;
  const std::string cfg_path = dir + "/config.json";
  MEGADLM_CHECK(fs::exists(cfg_path), dir, ": no config.json (not a HuggingFace checkpoint directory)");
  try {
    ck.raw_config = json::parse(read_file(cfg_path));
  } catch (const json::exception& e) {
    fail(cfg_path, ": not valid JSON (", e.what(), ")");
  }
  ck.info = hf_config_to_info(ck.raw_config, cfg_path);
  validate_config(ck.info.config);
  ShardedSafetensors st(dir);
  ck.dtype = st.dominant_dtype();
  // GPT-2 checkpoints saved from GPT2Model (openai-community/gpt2 itself) lack the "transformer."
  // prefix of GPT2LMHeadModel's names.
  auto resolve = [&](const std::string& hf) {
    if (st.has(hf) || ck.info.layout != HfLayout::GPT2 || hf.rfind("transformer.", 0) != 0) return hf;
    const std::string bare = hf.substr(12);
    return st.has(bare) ? bare : hf;
  };
  std::set<std::string> used;
  ck.params = read_hf_language_params(st, ck.info, resolve, used);
  for (const std::string& n : st.names()) {
    if (used.count(n) || ignorable(n)) continue;
    // A tied model may still store the head; it must then equal the embedding, which we keep.
    if (!ck.info.config.untie_embeddings_and_output_weights &&
        (n == "lm_head.weight" || n == "model.transformer.ff_out.weight"))
      continue;
    fail(dir, ": tensor '", n, "' is not used by the ", hf_layout_name(ck.info.layout), " layout with this config.json");
  }
  return ck;
}

void load_params_into(const std::vector<SafetensorsEntry>& params, ParamStore& ps, const std::string& where) {
  std::set<std::string> given;
  for (const auto& e : params) {
    const int id = ps.find(e.name);
    MEGADLM_CHECK(id >= 0, where, ": tensor '", e.name, "' is not a parameter of the model");
    Tensor dst = ps.value(id);
    MEGADLM_CHECK(dst.shape() == e.tensor.shape(), where, ": tensor '", e.name, "' has shape ", e.tensor.shape().str(),
                  " but the model's is ", dst.shape().str());
    MEGADLM_CHECK(e.tensor.dtype() == DType::F32, where, ": tensor '", e.name, "' is not F32");
    dst.copy_from(e.tensor);
    given.insert(e.name);
  }
  for (const auto& info : ps.infos())
    MEGADLM_CHECK(given.count(info.name), where, ": no value for the model parameter '", info.name, "'");
}

std::vector<SafetensorsEntry> model_params(const ParamStore& ps) {
  std::vector<SafetensorsEntry> out;
  for (int i = 0; i < ps.count(); ++i) out.push_back({ps.info(i).name, ps.value(i)});
  return out;
}

std::vector<SafetensorsEntry> params_to_hf(const std::vector<SafetensorsEntry>& params, const HfModelInfo& info,
                                           DType dtype) {
  MEGADLM_CHECK(dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16, "HuggingFace export dtype ",
                dtype_name(dtype), " is not supported (F32, BF16, F16)");
  // First pass: the shape of every HF tensor, from the pieces that reference it.
  struct Target {
    HfShape shape;
    Tensor t;
    int64_t filled = 0;
  };
  std::map<std::string, Target> targets;
  std::vector<std::string> order;
  struct Use {
    const SafetensorsEntry* src;
    std::vector<Piece> pieces;
  };
  std::vector<Use> uses;
  for (const auto& e : params) {
    MEGADLM_CHECK(e.tensor.dtype() == DType::F32, "parameter '", e.name, "' is not F32");
    const Shape& s = e.tensor.shape();
    Use u{&e, pieces_for(info.layout, info.config, e.name, s[0])};
    const int64_t K = s.n == 1 ? 1 : s.numel() / s[0];
    for (const Piece& p : u.pieces) {
      auto [it, fresh] = targets.try_emplace(p.hf);
      if (fresh) order.push_back(p.hf);
      HfShape& hs = it->second.shape;
      hs.rows = std::max(hs.rows, p.row0 + p.rows);
      hs.cols = K;
      hs.transpose = p.transpose;
      hs.one_d = s.n == 1;
    }
    uses.push_back(std::move(u));
  }
  for (auto& [name, tg] : targets) {
    const HfShape& hs = tg.shape;
    const Shape shape = hs.one_d ? Shape{hs.rows} : hs.transpose ? Shape{hs.cols, hs.rows} : Shape{hs.rows, hs.cols};
    tg.t = Tensor::empty(shape, dtype);
  }
  for (const Use& u : uses) {
    const Shape& s = u.src->tensor.shape();
    const int64_t K = s.n == 1 ? 1 : s.numel() / s[0];
    const float* x = u.src->tensor.data<float>();
    int64_t row = 0;
    for (const Piece& p : u.pieces) {
      Target& tg = targets[p.hf];
      for (int64_t r = 0; r < p.rows; ++r)
        for (int64_t k = 0; k < K; ++k) hf_set(tg.t, p.transpose, p.row0 + r, k, K, x[(row + r) * K + k]);
      tg.filled += p.rows;
      row += p.rows;
    }
  }
  std::vector<SafetensorsEntry> out;
  for (const std::string& n : order) {
    Target& tg = targets[n];
    MEGADLM_CHECK(tg.filled == tg.shape.rows, "export: HF tensor '", n, "' got ", tg.filled, " of ", tg.shape.rows, " rows");
    out.push_back({n, tg.t});
  }
  return out;
}

// The model without its padded vocabulary rows (config real_vocab_size): transformers takes the
// softmax over every row of its vocab_size, where ours masks the padding, so the HF model holds the
// tokens' rows only and gives the same probabilities. Views of the first rows of `params`.
static std::vector<SafetensorsEntry> without_vocab_padding(const std::vector<SafetensorsEntry>& params,
                                                           HfModelInfo& info) {
  TransformerConfig& c = info.config;
  if (c.real_vocab_size <= 0 || c.real_vocab_size >= c.vocab_size) return params;
  std::vector<SafetensorsEntry> out = params;
  for (SafetensorsEntry& e : out) {
    if (e.name != "embed_tokens.weight" && e.name != "lm_head.weight") continue;
    const Shape& s = e.tensor.shape();
    MEGADLM_CHECK(s.n == 2 && s[0] == c.vocab_size, "export: '", e.name, "' has shape ", s.str(), ", expected [",
                  c.vocab_size, ", C]");
    e.tensor = Tensor::borrow(const_cast<float*>(e.tensor.data<float>()), {c.real_vocab_size, s[1]}, DType::F32);
  }
  c.vocab_size = c.real_vocab_size;
  c.real_vocab_size = 0;
  return out;
}

HfExport hf_export(const std::vector<SafetensorsEntry>& all_params, const HfModelInfo& model_info, DType dtype) {
  HfModelInfo info = model_info;
  const std::vector<SafetensorsEntry> params = without_vocab_padding(all_params, info);
  HfExport out;
  out.config = hf_config_from_info(info, dtype);  // first: refuses what the layout cannot hold
  out.tensors = params_to_hf(params, info, dtype);
  return out;
}

void write_hf_checkpoint(const std::string& dir, const std::vector<SafetensorsEntry>& all_params,
                         const HfModelInfo& model_info, const HfWriteOptions& opt) {
  const HfExport hf = hf_export(all_params, model_info, opt.dtype);
  fs::create_directories(dir);
  write_sharded_safetensors(dir, hf.tensors, opt.max_shard_bytes, {{"format", "pt"}});
  write_file_atomic(dir + "/config.json", hf.config.dump(2) + "\n");
}

}  // namespace megadlm
