// Native checkpoints: bit-exact save/load of parameters and AdamW moments, the pointer file, every
// failure a user can meet (corrupt or truncated files, a stale pointer, a model that does not match,
// a crash mid-save), the model config's JSON form, and rebuilding a model from a checkpoint alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/model_loader.h"
#include "checkpoint/native_checkpoint.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "models/config_json.h"
#include "models/difflm_spec.h"
#include "models/gpt_spec.h"
#include "test_util.h"

using namespace megadlm;
namespace fs = std::filesystem;

namespace {

class CkptDir {
 public:
  CkptDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = (fs::temp_directory_path() /
             ("megadlm_ck_" + std::to_string(::getpid()) + "_" + info->test_suite_name() + "_" + info->name()))
                .string();
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~CkptDir() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

TransformerConfig tiny_config() {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.num_query_groups = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 24;
  c.vocab_size = 29;
  c.max_position_embeddings = 16;
  return c;
}

// LLaMA-style diffusion config: every field away from its default, so a round trip that drops one shows.
TransformerConfig llama_config() {
  TransformerConfig c;
  c.num_layers = 2;
  c.hidden_size = 16;
  c.num_attention_heads = 4;
  c.num_query_groups = 2;
  c.kv_channels = 6;
  c.ffn_hidden_size = 20;
  c.vocab_size = 31;
  c.max_position_embeddings = 24;
  c.normalization = NormKind::RMSNorm;
  c.norm_epsilon = 1e-6f;
  c.activation = Activation::SwiGLU;
  c.add_bias_linear = false;
  c.add_qkv_bias = true;
  c.position_embedding = PositionEmbedding::Rope;
  c.rotary_base = 50000.0;
  c.qk_layernorm = true;
  c.untie_embeddings_and_output_weights = true;
  c.init_method_std = 0.3f;
  c.attention_mask = MaskType::None;
  c.attention_block_size = 0;
  return c;
}

std::unique_ptr<LanguageModel> make_model(const TransformerConfig& c, uint64_t seed) {
  auto m = std::make_unique<LanguageModel>(c, gpt_model_spec(c), ParallelContext::single());
  m->params().init(seed);
  return m;
}

// One AdamW step with random gradients, so the moments are non-trivial.
void take_step(LanguageModel& m, AdamW& opt, uint64_t seed) {
  ParamStore& ps = m.params();
  const std::vector<float> g = test::random_vector(ps.numel(), seed);
  std::copy(g.begin(), g.end(), ps.grads());
  opt.step(1e-2);
}

AdamWConfig adam_config() {
  AdamWConfig c;
  c.clip_grad = 0.0f;
  return c;
}

bool same_bytes(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, static_cast<size_t>(n) * 4) == 0; }

void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error (expected one naming " << parts.front() << ")";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

void flip_byte(const std::string& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x20);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(&c, 1);
}

}  // namespace

TEST(NativeCheckpoint, SaveLoadIsBitExactForParametersAndMoments) {
  CkptDir dir;
  auto a = make_model(tiny_config(), 1);
  AdamW opt_a(a->params(), adam_config());
  take_step(*a, opt_a, 10);
  take_step(*a, opt_a, 11);
  CheckpointState st;
  st.iteration = 42;
  st.consumed_samples = 1234567890123ull;
  st.meta = {{"model_type", "gpt"}, {"note", "hello"}};
  const std::string written = save_checkpoint(dir.str(), *a, &opt_a, st);
  EXPECT_EQ(written, dir / "iter_0000042");
  EXPECT_TRUE(fs::exists(written + "/model.safetensors"));
  EXPECT_TRUE(fs::exists(written + "/optimizer.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "iter_0000042.tmp"));
  EXPECT_EQ(read_file(dir / "latest_checkpointed_iteration.txt"), "42\n");

  auto b = make_model(tiny_config(), 2);  // different initial values
  AdamW opt_b(b->params(), adam_config());
  ASSERT_FALSE(same_bytes(a->params().values(), b->params().values(), a->params().numel()));
  const std::string resolved = resolve_checkpoint_dir(dir.str());
  EXPECT_EQ(resolved, written);
  load_checkpoint_tensors(resolved, *b, &opt_b);
  const ParamStore& pa = a->params();
  const ParamStore& pb = b->params();
  ASSERT_EQ(pa.count(), pb.count());
  for (int i = 0; i < pa.count(); ++i) {
    const ParamInfo& p = pa.info(i);
    EXPECT_TRUE(same_bytes(pa.values() + p.offset, pb.values() + p.offset, p.shape.numel())) << p.name;
    EXPECT_TRUE(same_bytes(opt_a.exp_avg().data<float>() + p.offset, opt_b.exp_avg().data<float>() + p.offset,
                           p.shape.numel()))
        << "exp_avg." << p.name;
    EXPECT_TRUE(same_bytes(opt_a.exp_avg_sq().data<float>() + p.offset,
                           opt_b.exp_avg_sq().data<float>() + p.offset, p.shape.numel()))
        << "exp_avg_sq." << p.name;
  }
  EXPECT_EQ(opt_b.steps_taken(), 2);

  const CheckpointState back = read_checkpoint_state(resolved);
  EXPECT_EQ(back.iteration, 42);
  EXPECT_EQ(back.consumed_samples, 1234567890123ull);
  EXPECT_EQ(back.meta, st.meta);

  // The continued runs stay identical: one more step on each gives the same bytes.
  take_step(*a, opt_a, 12);
  take_step(*b, opt_b, 12);
  EXPECT_TRUE(same_bytes(pa.values(), pb.values(), pa.numel()));

  // Without an optimizer only the model file is read; a checkpoint without optimizer state loads too.
  auto c = make_model(tiny_config(), 3);
  load_checkpoint_tensors(resolved, *c, nullptr);
  CheckpointState st2 = st;
  st2.iteration = 43;
  save_checkpoint(dir.str(), *c, nullptr, st2);
  EXPECT_FALSE(fs::exists(dir / "iter_0000043/optimizer.safetensors"));
  auto d = make_model(tiny_config(), 4);
  load_checkpoint_tensors(dir / "iter_0000043", *d, nullptr);
  EXPECT_TRUE(same_bytes(c->params().values(), d->params().values(), c->params().numel()));
}

TEST(NativeCheckpoint, ResolveFollowsThePointer) {
  CkptDir dir;
  auto m = make_model(tiny_config(), 1);
  EXPECT_EQ(resolve_checkpoint_dir(dir.str()), "");  // nothing there yet
  CheckpointState st;
  st.iteration = 7;
  save_checkpoint(dir.str(), *m, nullptr, st);
  st.iteration = 12;
  save_checkpoint(dir.str(), *m, nullptr, st);
  EXPECT_EQ(resolve_checkpoint_dir(dir.str()), dir / "iter_0000012");
  // A checkpoint directory designates itself.
  EXPECT_EQ(resolve_checkpoint_dir(dir / "iter_0000007"), dir / "iter_0000007");
  // The pointer decides, not the largest directory name (Megatron's --load semantics).
  write_file_atomic(dir / "latest_checkpointed_iteration.txt", "7\n");
  EXPECT_EQ(resolve_checkpoint_dir(dir.str()), dir / "iter_0000007");
  // A pointer to a missing directory is an Error naming the pointer and the directory.
  write_file_atomic(dir / "latest_checkpointed_iteration.txt", "9\n");
  expect_error([&] { resolve_checkpoint_dir(dir.str()); },
               {dir / "latest_checkpointed_iteration.txt", "iter_0000009"});
  write_file_atomic(dir / "latest_checkpointed_iteration.txt", "release\n");
  expect_error([&] { resolve_checkpoint_dir(dir.str()); }, {dir / "latest_checkpointed_iteration.txt"});
  write_file_atomic(dir / "latest_checkpointed_iteration.txt", "-3\n");
  expect_error([&] { resolve_checkpoint_dir(dir.str()); }, {"negative"});
  // load_model on a directory with no checkpoint at all.
  CkptDir empty;
  fs::create_directories(empty / "sub");
  expect_error([&] { load_model(empty / "sub"); }, {empty / "sub", "no checkpoint"});
}

TEST(NativeCheckpoint, CorruptModelFileFailsTheChecksum) {
  CkptDir dir;
  auto m = make_model(tiny_config(), 1);
  AdamW opt(m->params(), adam_config());
  take_step(*m, opt, 3);
  CheckpointState st;
  st.iteration = 5;
  const std::string ck = save_checkpoint(dir.str(), *m, &opt, st);
  const std::string model_file = ck + "/model.safetensors";
  // Flip a byte in the data (a parameter value), where the safetensors structure stays valid.
  flip_byte(model_file, fs::file_size(model_file) - 5);
  auto fresh = make_model(tiny_config(), 2);
  expect_error([&] { load_checkpoint_tensors(ck, *fresh, nullptr); }, {model_file, "checksum"});
}

TEST(NativeCheckpoint, TruncatedOptimizerFileFails) {
  CkptDir dir;
  auto m = make_model(tiny_config(), 1);
  AdamW opt(m->params(), adam_config());
  take_step(*m, opt, 3);
  CheckpointState st;
  st.iteration = 5;
  const std::string ck = save_checkpoint(dir.str(), *m, &opt, st);
  const std::string opt_file = ck + "/optimizer.safetensors";
  fs::resize_file(opt_file, fs::file_size(opt_file) / 2);
  auto fresh = make_model(tiny_config(), 2);
  AdamW fresh_opt(fresh->params(), adam_config());
  expect_error([&] { load_checkpoint_tensors(ck, *fresh, &fresh_opt); }, {opt_file});
  // The model alone still loads.
  load_checkpoint_tensors(ck, *fresh, nullptr);
  EXPECT_TRUE(same_bytes(m->params().values(), fresh->params().values(), m->params().numel()));
  // A missing file is an Error naming it too.
  fs::remove(opt_file);
  expect_error([&] { load_checkpoint_tensors(ck, *fresh, &fresh_opt); }, {opt_file, "missing"});
}

TEST(NativeCheckpoint, CorruptStateJsonIsAnErrorNamingIt) {
  CkptDir dir;
  auto m = make_model(tiny_config(), 1);
  CheckpointState st;
  st.iteration = 2;
  const std::string ck = save_checkpoint(dir.str(), *m, nullptr, st);
  write_file_atomic(ck + "/state.json", "{\"iteration\": 2, \"checksums");
  expect_error([&] { read_checkpoint_state(ck); }, {ck + "/state.json", "JSON"});
  auto fresh = make_model(tiny_config(), 2);
  expect_error([&] { load_checkpoint_tensors(ck, *fresh, nullptr); }, {ck + "/state.json", "JSON"});
  write_file_atomic(ck + "/state.json", "{\"iteration\": 2}");
  expect_error([&] { read_checkpoint_state(ck); }, {ck + "/state.json", "consumed_samples"});
  // The loader validates the whole state file before touching the tensors.
  expect_error([&] { load_checkpoint_tensors(ck, *fresh, nullptr); }, {ck + "/state.json", "consumed_samples"});
}

TEST(NativeCheckpoint, ShapeMismatchNamesTheParameter) {
  CkptDir dir;
  auto m = make_model(tiny_config(), 1);
  CheckpointState st;
  st.iteration = 1;
  const std::string ck = save_checkpoint(dir.str(), *m, nullptr, st);

  // A wider MLP: the first parameter whose shape differs is named (the loader goes in parameter order).
  TransformerConfig wide = tiny_config();
  wide.ffn_hidden_size = 32;
  auto w = make_model(wide, 1);
  std::string first_diff;
  for (int i = 0; i < w->params().count() && first_diff.empty(); ++i) {
    const ParamInfo& p = w->params().info(i);
    const int j = m->params().find(p.name);
    ASSERT_GE(j, 0) << p.name;
    if (m->params().info(j).shape != p.shape) first_diff = p.name;
  }
  ASSERT_FALSE(first_diff.empty());
  expect_error([&] { load_checkpoint_tensors(ck, *w, nullptr); },
               {ck + "/model.safetensors", "'" + first_diff + "'", "shape"});

  // A deeper model: the missing layer's parameter is named.
  TransformerConfig deep = tiny_config();
  deep.num_layers = 3;
  auto d = make_model(deep, 1);
  expect_error([&] { load_checkpoint_tensors(ck, *d, nullptr); }, {ck + "/model.safetensors", "'layers.2."});

  // Same element count, different shape (a transposed matrix, checksum made consistent): still an Error.
  {
    std::string name;  // the first non-square matrix
    for (int i = 0; i < m->params().count() && name.empty(); ++i) {
      const Shape& sh = m->params().info(i).shape;
      if (sh.n == 2 && sh[0] != sh[1]) name = m->params().info(i).name;
    }
    ASSERT_FALSE(name.empty());
    const Shape orig = m->params().info(m->params().find(name)).shape;
    std::vector<SafetensorsEntry> entries;
    {
      SafetensorsFile f(ck + "/model.safetensors");
      for (const std::string& n : f.names()) {
        Tensor t = f.get(n).clone();
        if (n == name) t = t.view({orig[1], orig[0]});
        entries.push_back({n, t});
      }
    }
    write_safetensors(ck + "/model.safetensors", entries);
    nlohmann::json j = nlohmann::json::parse(read_file(ck + "/state.json"));
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  static_cast<unsigned long long>(file_checksum(ck + "/model.safetensors")));
    j["checksums_fnv1a64"]["model.safetensors"] = hex;
    write_file_atomic(ck + "/state.json", j.dump());
    auto same = make_model(tiny_config(), 1);
    expect_error([&] { load_checkpoint_tensors(ck, *same, nullptr); },
                 {ck + "/model.safetensors", "'" + name + "'", "shape"});
  }
}

TEST(NativeCheckpoint, SavingTheSameIterationTwiceReplacesIt) {
  CkptDir dir;
  auto m = make_model(tiny_config(), 1);
  CheckpointState st;
  st.iteration = 100;
  st.meta = {{"version", 1}};
  save_checkpoint(dir.str(), *m, nullptr, st);
  m->params().init(77);  // new values
  st.meta = {{"version", 2}};
  save_checkpoint(dir.str(), *m, nullptr, st);
  std::vector<std::string> entries;
  for (const auto& e : fs::directory_iterator(dir.str())) entries.push_back(e.path().filename().string());
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(entries, (std::vector<std::string>{"iter_0000100", "latest_checkpointed_iteration.txt"}));
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir / "iter_0000100")) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"model.safetensors", "state.json"}));
  EXPECT_EQ(read_checkpoint_state(dir / "iter_0000100").meta, st.meta);
  auto fresh = make_model(tiny_config(), 1);
  load_checkpoint_tensors(dir / "iter_0000100", *fresh, nullptr);
  EXPECT_TRUE(same_bytes(m->params().values(), fresh->params().values(), m->params().numel()));
}

TEST(NativeCheckpoint, LeftoverTempDirectoryFromACrashIsIgnored) {
  CkptDir dir;
  auto m = make_model(tiny_config(), 1);
  CheckpointState st;
  st.iteration = 20;
  const std::string good = save_checkpoint(dir.str(), *m, nullptr, st);
  // A crash while writing iteration 30: a half-written temp directory, pointer still at 20.
  fs::create_directories(dir / "iter_0000030.tmp");
  {
    std::ofstream half(dir / "iter_0000030.tmp/model.safetensors", std::ios::binary);
    half << "\x10\x00\x00";
  }
  EXPECT_EQ(resolve_checkpoint_dir(dir.str()), good);
  auto fresh = make_model(tiny_config(), 9);
  load_checkpoint_tensors(resolve_checkpoint_dir(dir.str()), *fresh, nullptr);
  EXPECT_TRUE(same_bytes(m->params().values(), fresh->params().values(), m->params().numel()));
  // Saving iteration 30 for real later clears the leftover.
  st.iteration = 30;
  save_checkpoint(dir.str(), *m, nullptr, st);
  EXPECT_FALSE(fs::exists(dir / "iter_0000030.tmp"));
  EXPECT_EQ(resolve_checkpoint_dir(dir.str()), dir / "iter_0000030");
}

// ---- config JSON ----------------------------------------------------------------------------------------

TEST(ConfigJson, RoundTripKeepsEveryField) {
  for (const TransformerConfig& c : {tiny_config(), llama_config()}) {
    const nlohmann::json j = nlohmann::json::parse(config_to_json(c).dump());
    const TransformerConfig r = config_from_json(j, "test.json");
    EXPECT_EQ(r.num_layers, c.num_layers);
    EXPECT_EQ(r.hidden_size, c.hidden_size);
    EXPECT_EQ(r.num_attention_heads, c.num_attention_heads);
    EXPECT_EQ(r.num_query_groups, c.num_query_groups);
    EXPECT_EQ(r.kv_channels, c.kv_channels);
    EXPECT_EQ(r.ffn_hidden_size, c.ffn_hidden_size);
    EXPECT_EQ(r.vocab_size, c.vocab_size);
    EXPECT_EQ(r.max_position_embeddings, c.max_position_embeddings);
    EXPECT_EQ(r.normalization, c.normalization);
    EXPECT_EQ(r.norm_epsilon, c.norm_epsilon);
    EXPECT_EQ(r.activation, c.activation);
    EXPECT_EQ(r.add_bias_linear, c.add_bias_linear);
    EXPECT_EQ(r.add_qkv_bias, c.add_qkv_bias);
    EXPECT_EQ(r.position_embedding, c.position_embedding);
    EXPECT_EQ(r.rotary_base, c.rotary_base);
    EXPECT_EQ(r.qk_layernorm, c.qk_layernorm);
    EXPECT_EQ(r.untie_embeddings_and_output_weights, c.untie_embeddings_and_output_weights);
    EXPECT_EQ(r.init_method_std, c.init_method_std);
    EXPECT_EQ(r.attention_mask, c.attention_mask);
    EXPECT_EQ(r.attention_block_size, c.attention_block_size);
  }
  TransformerConfig bc = tiny_config();
  bc.attention_mask = MaskType::BlockCausal;
  bc.attention_block_size = 4;
  bc.position_embedding = PositionEmbedding::None;
  const TransformerConfig r = config_from_json(config_to_json(bc), "x");
  EXPECT_EQ(r.attention_mask, MaskType::BlockCausal);
  EXPECT_EQ(r.attention_block_size, 4);
  EXPECT_EQ(r.position_embedding, PositionEmbedding::None);
}

TEST(ConfigJson, MissingOrBadFieldsNameTheFieldAndTheFile) {
  const nlohmann::json good = config_to_json(llama_config());
  for (const char* key : {"num_layers", "hidden_size", "vocab_size", "ffn_hidden_size", "normalization", "swiglu",
                          "position_embedding_type", "untie_embeddings_and_output_weights"}) {
    nlohmann::json j = good;
    j.erase(key);
    expect_error([&] { config_from_json(j, "ckpt/state.json"); }, {"ckpt/state.json", std::string("'") + key + "'"});
  }
  nlohmann::json j = good;
  j["num_layers"] = "two";
  expect_error([&] { config_from_json(j, "ckpt/state.json"); }, {"ckpt/state.json", "'num_layers'", "type"});
  j = good;
  j["position_embedding_type"] = "alibi";
  expect_error([&] { config_from_json(j, "ckpt/state.json"); }, {"ckpt/state.json", "alibi"});
  j = good;
  j["attention_mask_type"] = "sliding";
  expect_error([&] { config_from_json(j, "ckpt/state.json"); }, {"ckpt/state.json", "sliding"});
  expect_error([&] { config_from_json(nlohmann::json::array(), "ckpt/state.json"); }, {"ckpt/state.json"});
}

// ---- model_loader ----------------------------------------------------------------------------------------

TEST(ModelLoader, RebuildsAnIdenticalModelFromTheCheckpointAlone) {
  CkptDir dir;
  const TransformerConfig cfg = llama_config();
  auto m = std::make_unique<LanguageModel>(cfg, decoder_model_spec(cfg, difflm_layer_spec(cfg, cfg.attention_mask, cfg.attention_block_size)),
                                           ParallelContext::single());
  m->params().init(5);
  CheckpointState st;
  st.iteration = 3;
  st.meta = {{"config", config_to_json(cfg)}, {"model_type", "difflm"}, {"mask_token", 30}, {"eod", 1}};
  save_checkpoint(dir.str(), *m, nullptr, st);

  LoadedModel lm = load_model(dir.str());
  EXPECT_EQ(lm.dir, dir / "iter_0000003");
  EXPECT_TRUE(lm.diffusion);
  EXPECT_EQ(lm.mask_token, 30);
  EXPECT_EQ(lm.eod, 1);
  EXPECT_EQ(lm.state.iteration, 3);
  ASSERT_EQ(lm.model->params().numel(), m->params().numel());
  EXPECT_TRUE(same_bytes(lm.model->params().values(), m->params().values(), m->params().numel()));

  // Same logits on a fixed input (bidirectional: a change at the last position moves the first row).
  const int64_t B = 2, T = 7;
  std::vector<int32_t> tokens(B * T), positions(B * T);
  for (int64_t n = 0; n < B * T; ++n) {
    tokens[n] = static_cast<int32_t>((n * 7 + 3) % cfg.vocab_size);
    positions[n] = static_cast<int32_t>(n % T);
  }
  MicroBatch mb;
  mb.B = B;
  mb.T = T;
  mb.tokens = tokens;
  mb.positions = positions;
  const Tensor la = m->forward_logits(mb);
  const Tensor lb = lm.model->forward_logits(mb);
  ASSERT_EQ(la.numel(), B * T * cfg.vocab_size);
  ASSERT_EQ(lb.numel(), la.numel());
  EXPECT_TRUE(same_bytes(la.data<float>(), lb.data<float>(), la.numel()));
  m->arena().reset();
  lm.model->arena().reset();

  // A GPT checkpoint rebuilds as autoregressive.
  CkptDir gdir;
  auto g = make_model(tiny_config(), 6);
  st.meta = {{"config", config_to_json(tiny_config())}, {"model_type", "gpt"}};
  save_checkpoint(gdir.str(), *g, nullptr, st);
  LoadedModel lg = load_model(gdir.str());
  EXPECT_FALSE(lg.diffusion);
  EXPECT_EQ(lg.mask_token, -1);
  EXPECT_TRUE(same_bytes(lg.model->params().values(), g->params().values(), g->params().numel()));

  // Without the config in the state, the loader says so.
  st.meta = {{"model_type", "gpt"}};
  st.iteration = 4;
  save_checkpoint(gdir.str(), *g, nullptr, st);
  expect_error([&] { load_model(gdir.str()); }, {gdir / "iter_0000004/state.json", "config"});
}
