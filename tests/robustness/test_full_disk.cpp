// A full disk during a save, simulated at the OS level without root: the real
// pretrain_difflm runs with RLIMIT_FSIZE below the size of a checkpoint file and SIGXFSZ ignored, so
// its write() fails with EFBIG exactly where a full disk fails with ENOSPC. The save must report the
// file, the program exit non-zero, and the previous checkpoint stay the latest, intact and loadable,
// with no half-written directory left behind; training then resumes from it.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/native_checkpoint.h"
#include "child_process.h"
#include "test_util.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;

using test::plus;

TEST(FullDisk, FailedSaveReportsTheFileAndKeepsThePreviousCheckpoint) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  test::TempDir tmp;
  const std::string data = test::make_counting_dataset(tmp.str(), 60);
  const std::string save = tmp / "ckpt";
  const auto base = test::tiny_difflm_flags(data);
  auto r = test::run_binary("pretrain_difflm", plus(base, {"--train-iters", "2", "--save", save}), tmp / "first.log");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  const std::string good = save + "/iter_0000002";
  ASSERT_EQ(resolve_checkpoint_dir(save), good);
  const auto model_bytes = static_cast<long long>(fs::file_size(good + "/model.safetensors"));
  const auto opt_bytes = static_cast<long long>(fs::file_size(good + "/optimizer.safetensors"));
  ASSERT_LT(model_bytes, opt_bytes);  // optimizer state is twice the weights
  const uint64_t model_sum = file_checksum(good + "/model.safetensors");
  const uint64_t opt_sum = file_checksum(good + "/optimizer.safetensors");
  const std::string pointer = test::read_log(save + "/latest_checkpointed_iteration.txt");

  struct Case {
    long long limit;
    std::string file;  // the file whose write must fail
  };
  // The disk fills up during the first file, or after the first file was written in full.
  for (const Case& c : {Case{model_bytes / 2, "model.safetensors"}, Case{(model_bytes + opt_bytes) / 2,
                                                                          "optimizer.safetensors"}}) {
    SCOPED_TRACE(c.file);
    test::ChildOptions opt;
    opt.max_file_bytes = c.limit;
    r = test::run_binary("pretrain_difflm", plus(base, {"--train-iters", "4", "--load", save, "--save", save}),
                         tmp / "full.log", opt);
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_NE(r.output.find("iteration        4/"), std::string::npos) << "it trained up to the save\n" << r.output;
    EXPECT_NE(r.output.find("pretrain_difflm: error: "), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(save + "/iter_0000004.tmp/" + c.file + ": write failed (File too large)"),
              std::string::npos)
        << r.output;
    // The pointer, the previous directory and its files are as they were; nothing half-written is left.
    EXPECT_EQ(test::read_log(save + "/latest_checkpointed_iteration.txt"), pointer);
    EXPECT_EQ(resolve_checkpoint_dir(save), good);
    for (const auto& e : fs::directory_iterator(save))
      EXPECT_EQ(e.path().filename().string().rfind("iter_0000004", 0), std::string::npos) << e.path();
    EXPECT_EQ(test::entries_of(good), (std::set<std::string>{"model.safetensors", "optimizer.safetensors", "state.json"}));
    EXPECT_EQ(file_checksum(good + "/model.safetensors"), model_sum);
    EXPECT_EQ(file_checksum(good + "/optimizer.safetensors"), opt_sum);
  }

  // The checkpoint left is loadable: once there is room again, training resumes from iteration 2.
  r = test::run_binary("pretrain_difflm", plus(base, {"--train-iters", "4", "--load", save, "--save", save}),
                       tmp / "resume.log");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  EXPECT_NE(r.output.find("loaded checkpoint " + good + " (iteration 2"), std::string::npos) << r.output;
  EXPECT_EQ(resolve_checkpoint_dir(save), save + "/iter_0000004");
}
