// LLaVA training (pretrain_difflm --model-type llava, docs/llava.md) on a few shapes pictures
// (data/shape_scenes.h, 16 x 16, patches of 8: P = 4) preprocessed as LLaVA conversations: the samples
// expand each placeholder into P positions with loss mask 0 and carry their document's images; gpt and
// difflm backbones train and resume bitwise; --freeze-vision-model keeps the tower as initialised;
// evaluate scores answers and choices given their images; the refusals name their flag or file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/model_loader.h"
#include "checkpoint/native_checkpoint.h"
#include "checkpoint/safetensors.h"
#include "core/file_io.h"
#include "data/clip_image_processor.h"
#include "data/image.h"
#include "data/image_data.h"
#include "data/image_write.h"
#include "data/llava_dataset.h"
#include "data/loss_mask.h"
#include "data/preprocess.h"
#include "data/shape_scenes.h"
#include "models/gpt_spec.h"
#include "infer/likelihood.h"
#include "models/llava_model.h"
#include "robustness/child_process.h"
#include "test_util.h"
#include "tokenizers/tokenizer.h"
#include "train/data_setup.h"
#include "llava_data.h"
#include "train_fixture.h"

namespace megadlm {
namespace {

using test::plus;

using test::kImage;
using test::kP;
using test::llava_flags;
using test::make_llava_data;

std::vector<double> losses(const std::string& save_dir) {
  std::vector<double> out;
  for (const auto& j : test::training_lines(save_dir + "/metrics.jsonl")) out.push_back(j["loss"].get<double>());
  return out;
}

std::string error_of_run(const std::vector<std::string>& flags) {
  return test::error_of([&] { test::run_training(flags, {}); });
}

TEST(LlavaData, PlaceholdersExpandIntoPPositionsOutOfTheLossWithTheirImages) {
  int32_t in[] = {1, 9, 2, 9};
  uint8_t mask_in[] = {1, 0, 1, 0};
  int32_t out[10];
  uint8_t mask[10];
  ASSERT_EQ(expand_image_placeholders(in, mask_in, 4, 9, 3, out, mask, 10), 8);
  EXPECT_EQ(std::vector<int32_t>(out, out + 8), std::vector<int32_t>({1, 9, 9, 9, 2, 9, 9, 9}));
  EXPECT_EQ(std::vector<uint8_t>(mask, mask + 8), std::vector<uint8_t>({1, 0, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(expand_image_placeholders(in, mask_in, 4, 9, 3, out, mask, 5), 8);  // counted, not written past 5

  test::TempDir dir;
  const std::string prefix = make_llava_data(dir, 6);
  auto tokens = std::make_shared<IndexedDataset>(prefix);
  GPTDatasetConfig c;
  c.seq_length = 96;
  c.sft = SftLayout::Padding;
  c.pad_token = 256;
  auto sft = std::make_shared<SftDataset>(tokens, open_loss_mask(*tokens), SequenceRange{0, 6}, Split::Train, c);
  auto images = std::make_shared<ImageDataset>(llava_image_prefix(prefix));
  const LlavaDataset llava(sft, images, kP);
  const int32_t image = llava.image_token();
  std::vector<int32_t> stored, got(97);
  std::vector<uint8_t> got_mask(97);
  for (int64_t i = 0; i < llava.size(); ++i) {
    SCOPED_TRACE(i);
    const int32_t seq = sft->order()[static_cast<size_t>(i)];
    stored = tokens->get(seq);
    llava.sample(i, got.data());
    llava.sample_loss_mask(i, got_mask.data());
    const auto first = std::find(got.begin(), got.end(), image) - got.begin();
    ASSERT_EQ(std::count(got.begin(), got.end(), image), kP);  // one image, P positions in a run
    for (int64_t k = first; k < first + kP; ++k) {
      EXPECT_EQ(got[k], image);
      EXPECT_EQ(got_mask[k], 0);
    }
    // Around the run: the stored conversation, then the padding (eod, mask 0 for this config).
    const auto at = std::find(stored.begin(), stored.end(), image) - stored.begin();
    EXPECT_EQ(at, first);
    for (size_t k = static_cast<size_t>(at) + 1; k < stored.size(); ++k) EXPECT_EQ(got[k + kP - 1], stored[k]);
    for (size_t k = stored.size() + kP - 1; k < got.size(); ++k) EXPECT_EQ(got[k], 256);
    EXPECT_EQ(llava.images_in_sample(i), 1);
  }
  // Two samples' pixel values: their documents' images, in order.
  std::vector<float> px, one(3 * kImage * kImage);
  ASSERT_EQ(llava.batch_pixels(2, 2, px), 2);
  images->pixel_values(document_of_sequence(*tokens, sft->order()[3]), one.data());
  EXPECT_TRUE(std::equal(one.begin(), one.end(), px.begin() + static_cast<long>(one.size())));
  // A sequence too short for the expanded conversation: an Error naming --seq-length.
  const int64_t longest = [&] {
    int64_t m = 0;
    for (int64_t s = 0; s < 6; ++s) m = std::max<int64_t>(m, tokens->sequence_length(s));
    return m;
  }();
  GPTDatasetConfig short_cfg = c;
  short_cfg.seq_length = longest;  // the stored conversations fit, the expanded ones do not
  auto short_sft =
      std::make_shared<SftDataset>(tokens, open_loss_mask(*tokens), SequenceRange{0, 6}, Split::Train, short_cfg);
  const LlavaDataset too_short(short_sft, images, kP);
  std::vector<int32_t> buf(static_cast<size_t>(longest + 1));
  std::string e;
  for (int64_t i = 0; i < 6 && e.empty(); ++i) e = test::error_of([&] { too_short.sample(i, buf.data()); });
  EXPECT_NE(e.find("--seq-length"), std::string::npos) << e;
}

TEST(LlavaTraining, BothBackbonesResumeBitwise) {
  test::TempDir dir;
  const std::string data = make_llava_data(dir, 12);
  for (const std::string lm : {"gpt", "difflm"}) {
    SCOPED_TRACE(lm);
    const auto flags = plus(llava_flags(data, lm), {"--train-iters", "4"});
    const std::string full = dir / (lm + "_full"), part = dir / (lm + "_part");
    test::expect_bitwise_resume(flags, full, part, 4);
    if (HasFatalFailure()) return;
    const CheckpointState st = read_checkpoint_state(resolve_checkpoint_dir(full));
    EXPECT_EQ(st.meta["model_type"], "llava");
    EXPECT_EQ(st.meta["language_model_type"], lm);
    // The training data's image processor, which generate and the HuggingFace export then use.
    EXPECT_EQ(st.meta["image_processor"], clip_image_config_json(ImageDataset(llava_image_prefix(data)).processor()));
    // A resume with another tower is refused, naming what differs.
    const std::string e = error_of_run(plus(flags, {"--save", part, "--load", part, "--vision-feature-layer", "-1"}));
    EXPECT_NE(e.find("vision tower"), std::string::npos) << e;
  }
}

// MoE backbones by the decoders' flags: the language model's MLPs become routed experts (their
// tensors in the checkpoint), both backbones train and resume bitwise.
TEST(LlavaTraining, MoeBackbonesTrainAndResumeBitwise) {
  test::TempDir dir;
  const std::string data = make_llava_data(dir, 12);
  for (const std::string lm : {"gpt", "difflm"}) {
    SCOPED_TRACE(lm);
    const auto flags = plus(llava_flags(data, lm), {"--train-iters", "4", "--num-experts", "4", "--moe-router-topk",
                                                    "2", "--moe-aux-loss-coeff", "0.01"});
    const std::string full = dir / (lm + "_moe_full"), part = dir / (lm + "_moe_part");
    test::expect_bitwise_resume(flags, full, part, 4);
    if (HasFatalFailure()) return;
    const SafetensorsFile ckpt(resolve_checkpoint_dir(full) + "/model.safetensors");
    int experts = 0, tower = 0;
    for (const std::string& name : ckpt.names()) {
      experts += name.find("experts") != std::string::npos;
      tower += name.rfind("vision_tower.", 0) == 0;
    }
    EXPECT_GT(experts, 0);
    EXPECT_GT(tower, 0);
  }
}

// Autoregressive-then-diffusion training (Dimple): --finetune loads a gpt LLaVA checkpoint into a difflm
// LLaVA run, tower and projector included, bit for bit; without --finetune the other language model is
// an error that says what to add.
TEST(LlavaTraining, FinetuneAdaptsAGptLlavaIntoADiffusionBackbone) {
  test::TempDir dir;
  const std::string data = make_llava_data(dir, 8);
  test::run_training(plus(llava_flags(data, "gpt"), {"--train-iters", "3"}), {"--save", dir / "gpt"});
  Trainer gpt(test::parse_flags(plus(llava_flags(data, "gpt"), {"--train-iters", "4", "--load", dir / "gpt"})));
  const auto dlm_flags = plus(llava_flags(data, "difflm"), {"--train-iters", "2"});
  Trainer dlm(test::parse_flags(plus(dlm_flags, {"--load", dir / "gpt", "--finetune", "--save", dir / "dlm"})));
  const ParamStore &a = gpt.model().params(), &b = dlm.model().params();
  ASSERT_EQ(a.numel(), b.numel());
  EXPECT_TRUE(std::equal(a.values(), a.values() + a.numel(), b.values()));
  const auto [first, end] = llava_vision(dlm.model()).tower_params();
  EXPECT_LT(first, end);
  dlm.run();
  const auto l = losses(dir / "dlm");
  ASSERT_EQ(l.size(), 2u);
  for (double x : l) EXPECT_TRUE(std::isfinite(x) && x > 0) << x;
  EXPECT_EQ(read_checkpoint_state(resolve_checkpoint_dir(dir / "dlm")).meta["language_model_type"], "difflm");

  const std::string e = error_of_run(plus(dlm_flags, {"--load", dir / "gpt", "--save", dir / "dlm2"}));
  EXPECT_NE(e.find("the checkpoint's language model is gpt but --language-model-type is difflm (add --finetune"),
            std::string::npos)
      << e;
}

// generate answers a picture with both backbones' checkpoints (the image expanded into P positions of
// the prompt) and refuses --image for a checkpoint without a tower.
TEST(LlavaTraining, GenerateAnswersAPictureAndRefusesImagesWithoutATower) {
  MEGADLM_REQUIRE_BINARY("generate");
  test::TempDir dir;
  const std::string data = make_llava_data(dir, 8);
  const std::string prompt = "<|im_start|>user\n<image>\nWhat?<|im_end|>\n<|im_start|>assistant\n";
  for (const std::string lm : {"gpt", "difflm"}) {
    SCOPED_TRACE(lm);
    const std::string save = dir / lm;
    test::run_training(plus(llava_flags(data, lm), {"--train-iters", "2"}), {"--save", save});
    const std::string out = dir / (lm + ".jsonl");
    auto r = test::run_binary("generate", {"--load", save, "--image", dir / "pic0.png", "--prompt", prompt,
                                           "--max-new-tokens", "4", "--gen-length", "4", "--steps", "4",
                                           "--output", out},
                              dir / "log.txt");
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(read_file(out));
    EXPECT_EQ(j["image"], dir / "pic0.png");
    EXPECT_GE(j["tokens"].get<int64_t>(), 1);
    r = test::run_binary("generate", {"--load", save, "--prompt", prompt}, dir / "log.txt");
    EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
    EXPECT_NE(r.output.find("needs --image"), std::string::npos) << r.output;
  }
  const std::string text = test::make_sft_dataset(dir.str(), 8);
  const std::string gpt = dir / "text_gpt";
  test::run_training(plus({"pretrain_difflm"}, plus(test::tiny_sft_flags(text, "gpt"), {"--train-iters", "1"})),
                     {"--save", gpt});
  auto r = test::run_binary("generate", {"--load", gpt, "--image", dir / "pic0.png", "--prompt", "x"}, dir / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
  EXPECT_NE(r.output.find("--image needs a llava checkpoint"), std::string::npos) << r.output;
}

TEST(LlavaTraining, AFrozenTowerStaysAsInitialised) {
  test::TempDir dir;
  const std::string data = make_llava_data(dir, 8);
  Trainer t(test::parse_flags(plus(llava_flags(data, "gpt"), {"--train-iters", "2", "--freeze-vision-model"})));
  const std::vector<float> before(t.model().params().values(),
                                  t.model().params().values() + t.model().params().numel());
  t.run();
  const ParamStore& p = t.model().params();
  const auto [first, end] = llava_vision(t.model()).tower_params();
  const auto [proj_first, proj_end] = llava_vision(t.model()).projector_params();
  for (int id = 0; id < p.count(); ++id) {
    const ParamInfo& info = p.info(id);
    const bool same = std::equal(before.begin() + static_cast<long>(info.offset),
                                 before.begin() + static_cast<long>(info.offset + info.shape.numel()),
                                 p.values() + info.offset);
    if (id >= first && id < end) {
      EXPECT_TRUE(same) << info.name;
    }
    if (id >= proj_first && id < proj_end) {
      EXPECT_FALSE(same) << info.name;
    }
  }
}

// Frozen parameters are out of the gradient norm (Megatron's requires_grad=False parameters): with the
// language model frozen its parameters still get gradients on the way to the projector, and the step's
// logged norm is that of the tower's and the projector's alone.
TEST(LlavaTraining, FrozenParametersStayOutOfTheGradientNorm) {
  test::TempDir dir;
  const std::string data = make_llava_data(dir, 8);
  const std::string save = dir / "run";
  Trainer t(test::parse_flags(
      plus(llava_flags(data, "gpt"), {"--train-iters", "1", "--freeze-language-model", "--save", save})));
  double trained = 0, frozen = 0;
  t.set_after_backward_hook([&](int64_t, Trainer& tr) {
    const ParamStore& p = tr.model().params();
    const int end = llava_vision(tr.model()).projector_params().second;
    for (int id = 0; id < p.count(); ++id) {
      const ParamInfo& info = p.info(id);
      for (int64_t i = 0; i < info.shape.numel(); ++i) {
        const double g = p.grads()[info.offset + i];
        (id < end ? trained : frozen) += g * g;
      }
    }
  });
  t.run();
  const auto lines = test::training_lines(save + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 1u);
  const double logged = lines[0]["grad_norm"].get<double>();
  EXPECT_GT(frozen, 0.01 * trained);  // the frozen gradients are there, and would change the norm
  EXPECT_NEAR(logged, std::sqrt(trained), 1e-6 * std::sqrt(trained));
}

// evaluate with images, both backbones: --answer given --image, and --choices-file lines with their
// "image", against the same likelihoods computed here (the prompt's ids with the P image positions
// spelled out, the picture decoded and preprocessed, put into the micro-batches); another picture
// gives another likelihood. And the refusals.
TEST(LlavaTraining, EvaluateScoresAnswersAndChoicesGivenTheirImages) {
  MEGADLM_REQUIRE_BINARY("evaluate");
  test::TempDir dir;
  const std::string data = make_llava_data(dir, 8);
  const std::string before = "<|im_start|>user\n", after = "\nWhat?<|im_end|>\n<|im_start|>assistant\n";
  const std::string prompt = before + "<image>" + after;
  const std::vector<std::string> answers = {"one red circle", "three blue squares"};
  // Two choices items: picture 0 and picture 1, the same two answers.
  std::string lines;
  for (int k = 0; k < 2; ++k)
    lines += nlohmann::json{{"context", prompt}, {"choices", answers}, {"label", k},
                            {"image", dir / ("pic" + std::to_string(k) + ".png")}}.dump() + "\n";
  write_file_atomic(dir / "choices.jsonl", lines);
  for (const std::string lm : {"gpt", "difflm"}) {
    SCOPED_TRACE(lm);
    const std::string save = dir / lm;
    test::run_training(plus(llava_flags(data, lm), {"--train-iters", "3"}), {"--save", save});
    const std::vector<std::string> mc = {"--mc-samples", "4", "--micro-batch-size", "2", "--seed", "9"};
    auto evaluate = [&](const std::vector<std::string>& flags) {
      const auto r = test::run_binary("evaluate", plus(plus({"--load", save}, mc), flags), dir / "log.txt");
      EXPECT_TRUE(r.exited && r.exit_code == 0) << r.output;
      return nlohmann::json::parse(r.output.substr(r.output.find('{')));
    };
    // The likelihoods here.
    LoadedModel m = load_model(save);
    LlavaVision& vision = llava_vision(*m.model);
    const auto tok = make_tokenizer(TokenizerSpec::from_json(m.state.meta["tokenizer"]));
    std::vector<int32_t> context = tok->encode(before);
    context.insert(context.end(), static_cast<size_t>(kP), vision.options().image_token);
    const std::vector<int32_t> rest = tok->encode(after);
    context.insert(context.end(), rest.begin(), rest.end());
    ClipImageConfig processor;
    processor.shortest_edge = kImage;
    processor.crop_height = processor.crop_width = kImage;
    DiffusionLikelihoodOptions opt;
    opt.mask_token = m.mask_token;
    opt.mc_samples = 4;
    opt.batch = 2;
    opt.seed = 9;
    auto likelihood = [&](int picture, const std::string& answer, uint64_t sample_id) {
      const std::vector<float> px =
          clip_preprocess(processor, decode_image(read_file(dir / ("pic" + std::to_string(picture) + ".png")), "pic"));
      const SequenceInputs inputs = [&](int64_t copies, MicroBatch& mb) {
        mb.pixels.clear();
        for (int64_t c = 0; c < copies; ++c) mb.pixels.insert(mb.pixels.end(), px.begin(), px.end());
        mb.images = copies;
      };
      std::vector<int32_t> seq = context;
      const std::vector<int32_t> ans = tok->encode(answer);
      seq.insert(seq.end(), ans.begin(), ans.end());
      const int64_t begin = static_cast<int64_t>(context.size());
      return m.diffusion ? -diffusion_nll(*m.model, seq, begin, opt, sample_id, inputs).mean
                         : ar_log_likelihood(*m.model, seq, begin, inputs);
    };
    const std::string key = lm == "gpt" ? "log_likelihood" : "log_likelihood_bound";
    for (int picture = 0; picture < 2; ++picture) {
      const nlohmann::json j = evaluate({"--image", dir / ("pic" + std::to_string(picture) + ".png"), "--prompt", prompt,
                                         "--answer", answers[0]});
      EXPECT_EQ(j["conditional"]["image"], dir / ("pic" + std::to_string(picture) + ".png"));
      EXPECT_NEAR(j["conditional"][key].get<double>(), likelihood(picture, answers[0], 0), 1e-9) << picture;
    }
    EXPECT_NE(likelihood(0, answers[0], 0), likelihood(1, answers[0], 0));
    // The choices: each item's prediction is the argmax of the likelihoods given its picture.
    const nlohmann::json j = evaluate({"--choices-file", dir / "choices.jsonl"});
    ASSERT_EQ(j["multiple_choice"]["items"], 2);
    for (int k = 0; k < 2; ++k) {
      const double a = likelihood(k, answers[0], static_cast<uint64_t>(k)), b = likelihood(k, answers[1], static_cast<uint64_t>(k));
      EXPECT_EQ(j["multiple_choice"]["predictions"][static_cast<size_t>(k)], a >= b ? 0 : 1) << k;
    }
  }
  // The refusals: a prompt's <image> without --image, --image without <image> or without --answer, a
  // choices line whose "image" is not a path, --image for a model without a tower.
  const std::string gpt = dir / "gpt";
  auto refused = [&](const std::vector<std::string>& flags, const std::string& part) {
    const auto r = test::run_binary("evaluate", plus({"--load", gpt}, flags), dir / "log.txt");
    EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
    EXPECT_NE(r.output.find(part), std::string::npos) << r.output;
  };
  refused({"--prompt", prompt, "--answer", "x"}, "needs --image");
  refused({"--image", dir / "pic0.png", "--prompt", "x", "--answer", "y"}, "no <image> marker");
  refused({"--image", dir / "pic0.png", "--prompt", prompt}, "--answer");
  refused({"--image", dir / "missing.png", "--prompt", prompt, "--answer", "y"}, "missing.png");
  write_file_atomic(dir / "bad.jsonl", nlohmann::json{{"context", prompt}, {"choices", answers}, {"label", 0},
                                                      {"image", 3}}.dump() + "\n");
  refused({"--choices-file", dir / "bad.jsonl"}, "bad.jsonl:1");
  const std::string text = test::make_sft_dataset(dir.str(), 8);
  const std::string text_gpt = dir / "text_gpt";
  test::run_training(plus({"pretrain_difflm"}, plus(test::tiny_sft_flags(text, "gpt"), {"--train-iters", "1"})),
                     {"--save", text_gpt});
  const auto r = test::run_binary("evaluate", {"--load", text_gpt, "--image", dir / "pic0.png", "--prompt", "x",
                                               "--answer", "y"}, dir / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 1) << r.output;
  EXPECT_NE(r.output.find("--image needs a llava checkpoint"), std::string::npos) << r.output;
}

TEST(LlavaTraining, RefusalsNameTheFlagOrFile) {
  test::TempDir dir;
  const std::string data = make_llava_data(dir, 4);
  auto without = [](std::vector<std::string> f, const std::string& flag) {
    const auto at = std::find(f.begin(), f.end(), flag);
    f.erase(at);
    return f;
  };
  const auto base = llava_flags(data, "gpt");
  auto expect = [&](const std::vector<std::string>& flags, const std::string& part) {
    const std::string e = error_of_run(flags);
    EXPECT_NE(e.find(part), std::string::npos) << "expected '" << part << "' in '" << e << "'";
  };
  expect(without(base, "--sft"), "--sft");
  expect(plus(base, {"--img-w", "32"}), "--img-w");
  expect(plus(base, {"--language-model-type", "bert"}), "--language-model-type");
  expect(plus(base, {"--projector-type", "mlp3x_gelu"}), "--projector-type");
  expect(plus(base, {"--vision-feature-layer", "7"}), "vision_feature_layer");
  expect(plus(base, {"--position-embedding-type", "learned_absolute"}), "--position-embedding-type");
  expect(plus(base, {"--img-h", "32", "--img-w", "32"}), "--img-h");  // the stored images are 16 x 16
  expect({"pretrain_difflm", "--model-type", "gpt", "--vision-hidden-size", "8", "--data-path", data},
         "--vision-hidden-size");
  // Conversations without images: the sidecar says so.
  const std::string text_only = test::make_sft_dataset(dir.str(), 4);
  auto no_images = base;
  std::replace(no_images.begin(), no_images.end(), data, text_only);
  expect(no_images, "tokenizer.json");
}

}  // namespace
}  // namespace megadlm
