// TensorBoard event files (--tensorboard-dir): the CRC-32C and TFRecord framing, the Event encoding
// byte for byte against a file TensorBoard's own writer made (tools/reference/make_tensorboard_fixture.py),
// reading event files back, write errors, and a training run whose scalars must carry Megatron's tags
// and metrics.jsonl's numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "core/file_io.h"
#include "robustness/child_process.h"
#include "test_util.h"
#include "train/tensorboard_writer.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;

namespace {

std::string fixture_path() { return std::string(MEGADLM_SOURCE_DIR) + "/tests/train/fixtures/scalars.tfevents"; }

struct Scalar {
  double wall_time;
  int64_t step;
  std::string tag;
  float value;
};

// The scalars make_tensorboard_fixture.py wrote, in its order.
std::vector<Scalar> fixture_scalars() {
  const std::string long_tag = "moe/load_balancing_loss_" + std::string(120, 'x');
  return {{1700000001.25, 1, "lm loss", 10.5f},
          {1700000001.25, 4, "lm loss vs samples", 10.5f},
          {1700000002.0, 2, "learning-rate", 3e-4f},
          {1700000002.5, 300, "grad-norm", 0.0f},
          {1700000003.0, 0, "batch-size", 4.0f},
          {1700000003.75, int64_t(1) << 40, "lm loss validation ppl", -1.5e30f},
          {1700000004.1, 7, "z_loss", std::nanf("")},
          {1700000005.0, 123456789, long_tag, 0.1f}};
}
constexpr double kFixtureStart = 1700000000.0;
const char* const kTensorBoardsWriter = "tensorboard.summary.writer.event_file_writer";

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// The one event file in `dir`.
std::string only_event_file(const std::string& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path().string());
  EXPECT_EQ(files.size(), 1u);
  EXPECT_NE(files.empty() ? std::string::npos : files[0].find("events.out.tfevents."), std::string::npos);
  return files.empty() ? "" : files[0];
}

// tag -> step -> value, over a file's scalar events.
using Series = std::map<std::string, std::map<int64_t, float>>;
Series series_of(const std::string& path) {
  Series out;
  for (const TensorBoardEvent& e : read_event_file(path))
    for (const auto& [tag, value] : e.scalars) {
      EXPECT_FALSE(out[tag].count(e.step)) << tag << " written twice at step " << e.step;
      out[tag][e.step] = value;
    }
  return out;
}

std::vector<std::string> argv0(const std::vector<std::string>& f) { return test::plus({"pretrain_difflm"}, f); }

// `flags` with the value of --name replaced (the parser refuses a flag given twice).
std::vector<std::string> with(std::vector<std::string> flags, const std::string& name, const std::string& value) {
  for (size_t i = 0; i + 1 < flags.size(); ++i)
    if (flags[i] == name) flags[i + 1] = value;
  return flags;
}

}  // namespace

TEST(Crc32c, KnownCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);  // the CRC catalogue's check value for CRC-32C
  EXPECT_EQ(crc32c(""), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xFF, ascending 0..31.
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(crc32c_update(crc32c_update(0, "1234", 4), "56789", 5), 0xE3069283u);
  EXPECT_EQ(mask_crc32c(0), 0xa282ead8u);
}

TEST(TensorBoardFixture, OurWriterWritesTensorBoardsBytes) {
  test::TempDir tmp;
  const std::string path = tmp / "events.out.tfevents.ours";
  {
    TensorBoardWriterOptions options;
    options.start_time = kFixtureStart;
    options.source_writer = kTensorBoardsWriter;  // the first event names its writer
    TensorBoardWriter w(path, options);
    for (const Scalar& s : fixture_scalars()) w.add_scalar(s.tag, s.value, s.step, s.wall_time);
    w.flush();
  }
  const std::string ours = read_file(path), theirs = read_file(fixture_path());
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); ++i) ASSERT_EQ(ours[i], theirs[i]) << "first difference at byte " << i;
}

TEST(TensorBoardFixture, ReadsTensorBoardsFileBack) {
  const std::vector<TensorBoardEvent> events = read_event_file(fixture_path());
  const std::vector<Scalar> want = fixture_scalars();
  ASSERT_EQ(events.size(), want.size() + 1);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[0].wall_time, kFixtureStart);
  EXPECT_EQ(events[0].source_writer, kTensorBoardsWriter);
  EXPECT_TRUE(events[0].scalars.empty());
  for (size_t i = 0; i < want.size(); ++i) {
    const TensorBoardEvent& e = events[i + 1];
    SCOPED_TRACE(want[i].tag);
    EXPECT_EQ(e.wall_time, want[i].wall_time);
    EXPECT_EQ(e.step, want[i].step);
    EXPECT_TRUE(e.file_version.empty());
    ASSERT_EQ(e.scalars.size(), 1u);
    EXPECT_EQ(e.scalars[0].first, want[i].tag);
    if (std::isnan(want[i].value)) EXPECT_TRUE(std::isnan(e.scalars[0].second));
    else EXPECT_EQ(e.scalars[0].second, want[i].value);
  }
}

TEST(TensorBoardWriter, CorruptOrTruncatedFilesAreErrorsNamingTheFile) {
  test::TempDir tmp;
  const std::string good = read_file(fixture_path());
  const std::string path = tmp / "events.out.tfevents.bad";
  struct Case {
    std::string bytes, says;
  };
  std::string flipped_length = good, flipped_data = good;
  flipped_length[0] ^= 1;  // the first record's length
  flipped_data[30] ^= 1;   // inside the first record's data
  for (const Case& c : {Case{flipped_length, "the length's CRC does not match"},
                        Case{flipped_data, "the data's CRC does not match"},
                        Case{good.substr(0, good.size() - 3), "truncated"},
                        Case{good.substr(0, good.size() - 100), "truncated"}}) {
    SCOPED_TRACE(c.says);
    write_bytes(path, c.bytes);
    const std::string msg = test::error_of([&] { read_event_file(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.says), std::string::npos) << msg;
  }
}

TEST(TensorBoardWriter, AFailedWriteIsAnErrorNamingTheFile) {
  ASSERT_TRUE(fs::exists("/dev/full"));
  // Every write to /dev/full fails with ENOSPC, as on a full disk; the first event is flushed at once.
  const std::string msg = test::error_of([] { TensorBoardWriter w("/dev/full"); });
  EXPECT_NE(msg.find("/dev/full: write failed (No space left on device)"), std::string::npos) << msg;
}

TEST(TensorBoardWriter, EventFilesGetNewNamesInACreatedDirectory) {
  test::TempDir tmp;
  const std::string dir = tmp / "a/b";
  const std::string p1 = new_event_file_path(dir, 1700000000.5), p2 = new_event_file_path(dir, 1700000000.5);
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_EQ(p1.rfind(dir + "/events.out.tfevents.1700000000.", 0), 0u) << p1;
  EXPECT_NE(p1, p2);
  write_bytes(tmp / "file", "x");
  const std::string msg = test::error_of([&] { new_event_file_path(tmp / "file", 0); });
  EXPECT_NE(msg.find(tmp / "file"), std::string::npos) << msg;
}

// A training run's event file carries Megatron's tags at Megatron's steps, with metrics.jsonl's numbers.
TEST(TensorBoardTrainer, ScalarsMatchMetricsJsonl) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const std::string save = tmp / "save", tb = tmp / "tb";
  test::run_training(with(argv0(test::tiny_difflm_flags(data)), "--eval-interval", "2"),
                     {"--train-iters", "4", "--save", save, "--tensorboard-dir", tb,
                      "--log-validation-ppl-to-tensorboard", "--log-timers-to-tensorboard", "--log-throughput"});
  const Series s = series_of(only_event_file(tb));
  const auto lines = test::training_lines(save + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 4u);
  for (const char* tag : {"lm loss", "learning-rate", "grad-norm", "batch-size", "loss-scale"}) {
    SCOPED_TRACE(tag);
    ASSERT_TRUE(s.count(tag));
    ASSERT_TRUE(s.count(std::string(tag) + " vs samples"));
    EXPECT_EQ(s.at(tag).size(), 4u);
  }
  for (const auto& j : lines) {
    const int64_t it = j["iteration"].get<int64_t>(), samples = 4 * it;  // --global-batch-size 4
    SCOPED_TRACE("iteration " + std::to_string(it));
    EXPECT_EQ(s.at("lm loss").at(it), static_cast<float>(j["loss"].get<double>()));
    EXPECT_EQ(s.at("lm loss vs samples").at(samples), static_cast<float>(j["loss"].get<double>()));
    EXPECT_EQ(s.at("learning-rate").at(it), static_cast<float>(j["lr"].get<double>()));
    EXPECT_EQ(s.at("grad-norm").at(it), static_cast<float>(j["grad_norm"].get<double>()));
    EXPECT_EQ(s.at("grad-norm vs samples").at(samples), static_cast<float>(j["grad_norm"].get<double>()));
    EXPECT_EQ(s.at("batch-size").at(it), 4.0f);
    EXPECT_EQ(s.at("loss-scale").at(it), 1.0f);
    EXPECT_GT(s.at("iteration-time").at(it), 0.0f);
    EXPECT_GT(s.at("throughput").at(it), 0.0f);
  }
  // Validation at iterations 0, 2 and 4.
  std::vector<nlohmann::json> evals;
  std::ifstream in(save + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (line.find("val_loss") != std::string::npos) evals.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(evals.size(), 3u);
  ASSERT_EQ(s.at("lm loss validation").size(), 3u);
  for (const auto& j : evals) {
    const int64_t it = j["iteration"].get<int64_t>();
    SCOPED_TRACE("validation at " + std::to_string(it));
    EXPECT_EQ(s.at("lm loss validation").at(it), static_cast<float>(j["val_loss"].get<double>()));
    EXPECT_EQ(s.at("lm loss validation vs samples").at(4 * it), static_cast<float>(j["val_loss"].get<double>()));
    EXPECT_EQ(s.at("lm loss validation ppl").at(it), static_cast<float>(j["val_ppl"].get<double>()));
  }
  EXPECT_FALSE(s.count("world-size"));  // opt-in, as in Megatron
  EXPECT_FALSE(s.count("load_balancing_loss"));  // a dense model
}

// --tensorboard-log-interval, the opt-in and opt-out flags, and no --save: event files do not need it.
TEST(TensorBoardTrainer, LogIntervalAndMegatronsSwitches) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const std::string tb = tmp / "tb";
  test::run_training(argv0(test::tiny_difflm_flags(data)),
                     {"--train-iters", "5", "--tensorboard-dir", tb, "--tensorboard-log-interval", "2",
                      "--no-log-loss-scale-to-tensorboard", "--log-world-size-to-tensorboard",
                      "--tensorboard-queue-size", "5", "--log-batch-size-to-tensorboard"});
  const Series s = series_of(only_event_file(tb));
  ASSERT_TRUE(s.count("lm loss"));
  EXPECT_EQ(s.at("lm loss").size(), 2u);
  EXPECT_TRUE(s.at("lm loss").count(2) && s.at("lm loss").count(4));
  EXPECT_EQ(s.at("world-size").at(4), 1.0f);
  EXPECT_EQ(s.at("batch-size").at(2), 4.0f);
  for (const char* absent : {"loss-scale", "iteration-time", "throughput", "lm loss validation ppl"})
    EXPECT_FALSE(s.count(absent)) << absent;
  // The evaluation before training (--eval-interval 1000 allows no other).
  ASSERT_TRUE(s.count("lm loss validation"));
  EXPECT_EQ(s.at("lm loss validation").size(), 1u);
  EXPECT_TRUE(s.at("lm loss validation").count(0));
}

// MoE: Megatron's load_balancing_loss and z_loss, the mean over the MoE layers of each loss without
// its coefficient, from the same per-layer numbers as metrics.jsonl's moe_layers.
TEST(TensorBoardTrainer, MoELossesMatchMetricsJsonl) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const std::string save = tmp / "save", tb = tmp / "tb";
  const float aux_coeff = 1e-2f, z_coeff = 1e-3f;
  test::run_training(with(argv0(test::tiny_difflm_flags(data)), "--num-layers", "2"),
                     {"--train-iters", "3", "--num-experts", "4", "--moe-aux-loss-coeff", "1e-2",
                      "--moe-z-loss-coeff", "1e-3", "--save", save, "--tensorboard-dir", tb});
  const Series s = series_of(only_event_file(tb));
  const auto lines = test::training_lines(save + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  ASSERT_TRUE(s.count("load_balancing_loss") && s.count("z_loss"));
  EXPECT_FALSE(s.count("load_balancing_loss vs samples"));  // Megatron writes the MoE losses per iteration only
  for (const auto& j : lines) {
    const int64_t it = j["iteration"].get<int64_t>();
    SCOPED_TRACE("iteration " + std::to_string(it));
    ASSERT_EQ(j["moe_layers"].size(), 2u);
    double aux = 0, z = 0;
    for (const auto& l : j["moe_layers"]) {
      aux += l["aux_loss"].get<double>() / static_cast<double>(aux_coeff);
      z += l["z_loss"].get<double>() / static_cast<double>(z_coeff);
    }
    EXPECT_GT(aux, 0.0);
    EXPECT_FLOAT_EQ(s.at("load_balancing_loss").at(it), static_cast<float>(aux / 2));
    EXPECT_FLOAT_EQ(s.at("z_loss").at(it), static_cast<float>(z / 2));
  }
}

TEST(TensorBoardTrainer, BadDirectoryOrIntervalIsAnErrorNamingTheFlag) {
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const std::string not_a_dir = tmp / "file";
  write_bytes(not_a_dir, "x");
  const auto flags = argv0(test::tiny_difflm_flags(data));
  std::string msg = test::error_of([&] { test::run_training(flags, {"--train-iters", "1", "--tensorboard-dir", not_a_dir}); });
  EXPECT_NE(msg.find("--tensorboard-dir: " + not_a_dir), std::string::npos) << msg;
  msg = test::error_of([&] { test::parse_flags(test::plus(flags, {"--tensorboard-log-interval", "0"})); });
  EXPECT_NE(msg.find("--tensorboard-log-interval must be >= 1"), std::string::npos) << msg;
  if (!fs::exists(test::binary_path("pretrain_difflm"))) return;
  const auto r = test::run_binary("pretrain_difflm",
                                  test::plus(test::tiny_difflm_flags(data), {"--train-iters", "1", "--tensorboard-dir", not_a_dir}),
                                  tmp / "log.txt");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("pretrain_difflm: error: --tensorboard-dir: " + not_a_dir), std::string::npos) << r.output;
}

// A full disk while the event file grows (RLIMIT_FSIZE, as tests/robustness/test_full_disk.cpp does):
// the run ends with exit 1 and an error naming the event file, not a signal.
TEST(TensorBoardTrainer, FullDiskEndsTheRunWithAnErrorNamingTheEventFile) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const std::string tb = tmp / "tb";
  // Few log lines, so that the program's own log stays far below the limit the event file reaches.
  const auto flags = test::plus(with(test::tiny_difflm_flags(data), "--log-interval", "1000"), {"--train-iters", "30"});
  auto r = test::run_binary("pretrain_difflm", flags, tmp / "warm.log");  // builds the dataset indices
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  test::ChildOptions opt;
  opt.max_file_bytes = 6000;
  r = test::run_binary("pretrain_difflm", test::plus(flags, {"--tensorboard-dir", tb}), tmp / "full.log", opt);
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_NE(r.output.find("pretrain_difflm: error: " + tb + "/events.out.tfevents."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(": write failed (File too large)"), std::string::npos) << r.output;
}
