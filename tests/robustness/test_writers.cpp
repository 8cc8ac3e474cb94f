// Every output a program writes checks its writes. A full disk is simulated as in test_full_disk.cpp
// (RLIMIT_FSIZE below the output's size, SIGXFSZ ignored, so write() fails with EFBIG as it fails
// with ENOSPC): generate --output and evaluate --output exit 1 naming the file and leave a previous
// output intact with no temporary beside it; pretrain_difflm exits 1 naming metrics.jsonl. An output
// path that cannot be created is refused before the model is loaded.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/native_checkpoint.h"
#include "child_process.h"
#include "core/file_io.h"
#include "test_util.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;

using test::plus;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class Writers : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* p : {"pretrain_difflm", "generate", "evaluate"})
      if (!fs::exists(test::binary_path(p))) GTEST_SKIP() << p << " not built";
    data_ = test::make_counting_dataset(tmp_.str(), 60);
    base_ = test::tiny_difflm_flags(data_);
  }
  // A checkpoint of the tiny model, for generate and evaluate.
  std::string checkpoint() {
    const std::string save = tmp_ / "ckpt";
    const auto r = test::run_binary("pretrain_difflm", plus(base_, {"--train-iters", "1", "--save", save}),
                                    tmp_ / "train.log");
    EXPECT_TRUE(r.exited && r.exit_code == 0) << r.output;
    return save;
  }
  // Runs `program` writing `out` three ways: in full (its size is returned), on a disk that fills up
  // halfway through it (exit 1 naming the file, the previous content kept, no temporary left), and
  // with `out` under a regular file (refused before any work).
  void expect_checked_output(const std::string& program, const std::vector<std::string>& args) {
    const std::string dir = tmp_ / "out", out = dir + "/result";
    fs::create_directories(dir);
    test::ChildOptions quiet;
    quiet.stdout_path = "/dev/null";  // evaluate prints the JSON too: only the file is limited in size
    auto r = test::run_binary(program, plus(args, {"--output", out}), tmp_ / "full.log", quiet);
    ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
    const auto size = static_cast<long long>(fs::file_size(out));
    ASSERT_GT(size, 400) << "the output must outgrow the log for the limit to hit it first";
    ASSERT_LT(static_cast<long long>(r.output.size()), size / 2) << r.output;

    write_file_atomic(out, "previous output\n");
    test::ChildOptions full = quiet;
    full.max_file_bytes = size / 2;
    r = test::run_binary(program, plus(args, {"--output", out}), tmp_ / "disk_full.log", full);
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_TRUE(contains(r.output, program + ": error: " + out + ": write failed (File too large)")) << r.output;
    EXPECT_EQ(read_file(out), "previous output\n");
    EXPECT_EQ(test::entries_of(dir), std::set<std::string>{"result"});

    const std::string file = tmp_ / "a_file";
    write_file_atomic(file, "x");
    r = test::run_binary(program, plus(args, {"--output", file + "/result"}), tmp_ / "bad_path.log");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_TRUE(contains(r.output, program + ": error: --output " + file + "/result: cannot create it (Not a directory)"))
        << r.output;
  }
  test::TempDir tmp_;
  std::string data_;
  std::vector<std::string> base_;
};

}  // namespace

TEST_F(Writers, GenerateOutputOnAFullDiskIsAnErrorAndKeepsThePreviousFile) {
  const std::string ckpt = checkpoint();
  std::vector<std::string> args = {"--load", ckpt, "--gen-length", "8", "--steps", "8", "--prompt"};
  for (int i = 0; i < 12; ++i) args.push_back(std::to_string(i) + " 1 2 3");
  expect_checked_output("generate", args);
}

TEST_F(Writers, EvaluateOutputOnAFullDiskIsAnErrorAndKeepsThePreviousFile) {
  const std::string ckpt = checkpoint();
  expect_checked_output("evaluate", {"--load", ckpt, "--data-path", data_, "--seq-length", "16", "--eval-samples",
                                     "2", "--mc-samples", "2"});
}

TEST_F(Writers, MetricsJsonlOnAFullDiskStopsTrainingNamingIt) {
  // metrics.jsonl is appended to: one left by earlier runs fills the disk at the first new line,
  // while the log and the checkpoint files stay below the limit.
  const long long limit = 1 << 20;
  const std::string save = tmp_ / "ckpt";
  fs::create_directories(save);
  std::string earlier;
  const std::string line = "{\"iteration\":0,\"val_loss\":4.0,\"val_ppl\":54.6}\n";
  while (static_cast<long long>(earlier.size() + line.size()) < limit - 8) earlier += line;
  write_file_atomic(save + "/metrics.jsonl", earlier);
  test::ChildOptions full;
  full.max_file_bytes = limit;
  const auto r = test::run_binary("pretrain_difflm", plus(base_, {"--train-iters", "3", "--save", save}),
                                  tmp_ / "train.log", full);
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_TRUE(contains(r.output, "pretrain_difflm: error: " + save + "/metrics.jsonl: write failed (File too large)"))
      << r.output;
  EXPECT_FALSE(contains(r.output, "iteration        2/")) << "it trained on after the failed write\n" << r.output;
}
