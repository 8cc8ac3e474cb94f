// The checkpoint directory's state is read from what is on disk, and a run never replaces checkpoints
// it did not resume from: a missing pointer file resumes from the newest complete iter_N (skipped
// ones named with the reason), a state.json whose iteration contradicts its directory's name is an
// Error, a new run refuses a --save directory that holds checkpoints, and an unwritable --save or an
// impossible --load is refused at start-up, before any training.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint/native_checkpoint.h"
#include "child_process.h"
#include "core/file_io.h"
#include "models/gpt_spec.h"
#include "test_util.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;

using test::plus;

namespace {

const char* kPointer = "latest_checkpointed_iteration.txt";

TransformerConfig tiny_config() {
  TransformerConfig c;
  c.num_layers = 1;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.num_query_groups = 2;
  c.kv_channels = 8;
  c.ffn_hidden_size = 24;
  c.vocab_size = 29;
  c.max_position_embeddings = 16;
  return c;
}

std::unique_ptr<LanguageModel> make_model(uint64_t seed) {
  auto m = std::make_unique<LanguageModel>(tiny_config(), gpt_model_spec(tiny_config()), ParallelContext::single());
  m->params().init(seed);
  return m;
}

std::string save_at(const std::string& dir, const LanguageModel& m, int64_t iteration) {
  CheckpointState st;
  st.iteration = iteration;
  return save_checkpoint(dir, m, nullptr, st);
}

void set_state_iteration(const std::string& ckpt, int64_t iteration) {
  nlohmann::json j = nlohmann::json::parse(read_file(ckpt + "/state.json"));
  j["iteration"] = iteration;
  write_file_atomic(ckpt + "/state.json", j.dump(2) + "\n");
}

// Every file under `dir` with its checksum: to show that a directory was left exactly as it was.
std::map<std::string, uint64_t> checksums_under(const std::string& dir) {
  std::map<std::string, uint64_t> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = file_checksum(e.path().string());
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The resolved directory and what was logged on the way.
std::pair<std::string, std::string> resolve_logged(const std::string& dir) {
  testing::internal::CaptureStderr();
  std::string resolved;
  try {
    resolved = resolve_checkpoint_dir(dir);
  } catch (...) {
    testing::internal::GetCapturedStderr();
    throw;
  }
  return {resolved, testing::internal::GetCapturedStderr()};
}

}  // namespace

TEST(CheckpointDir, MissingPointerResumesFromTheNewestCompleteCheckpoint) {
  test::TempDir tmp;
  const std::string dir = tmp / "ckpt";
  auto m = make_model(1);
  save_at(dir, *m, 3);
  const std::string good = save_at(dir, *m, 5);
  // Newer than the good one: a directory whose state.json says another iteration, one with a
  // truncated model file, and a crashed save's temporary directory.
  fs::copy(good, dir + "/iter_0000006");
  fs::copy(good, dir + "/iter_0000008");
  set_state_iteration(dir + "/iter_0000008", 8);
  fs::resize_file(dir + "/iter_0000008/model.safetensors", 100);
  fs::copy(good, dir + "/iter_0000009.tmp");
  fs::remove(dir + "/" + kPointer);

  const auto [resolved, log] = resolve_logged(dir);
  EXPECT_EQ(resolved, good);
  EXPECT_TRUE(contains(log, kPointer)) << log;
  EXPECT_TRUE(contains(log, "iter_0000009.tmp (an unfinished save")) << log;
  EXPECT_TRUE(contains(log, "iter_0000008 (" + dir + "/iter_0000008/model.safetensors: checksum mismatch")) << log;
  EXPECT_TRUE(contains(log, "iter_0000006 (" + dir + "/iter_0000006/state.json: iteration 5 does not match")) << log;
  // Older directories are not looked at once a complete one is found.
  EXPECT_FALSE(contains(log, "iter_0000003")) << log;
}

TEST(CheckpointDir, MissingPointerWithNoCompleteCheckpointIsAnError) {
  test::TempDir tmp;
  const std::string dir = tmp / "ckpt";
  auto m = make_model(1);
  const std::string only = save_at(dir, *m, 4);
  fs::remove(only + "/model.safetensors");
  fs::remove(dir + "/" + kPointer);
  const std::string msg = test::error_of([&] { resolve_logged(dir); });
  EXPECT_TRUE(contains(msg, dir + ": no " + kPointer)) << msg;
  EXPECT_TRUE(contains(msg, "iter_0000004 (" + only + "/model.safetensors: missing")) << msg;
  EXPECT_TRUE(contains(msg, "refusing to start from scratch")) << msg;
  // A directory with no checkpoint directories at all holds no checkpoint, quietly.
  fs::create_directories(tmp / "empty/iter_0000002.tmp");
  EXPECT_EQ(resolve_checkpoint_dir(tmp / "empty"), "");
}

TEST(CheckpointDir, StateJsonIterationMustMatchTheDirectoryName) {
  test::TempDir tmp;
  const std::string dir = tmp / "ckpt";
  auto m = make_model(1);
  const std::string ck = save_at(dir, *m, 40);
  set_state_iteration(ck, 20);
  for (const std::string& d : {ck, ck + "/"}) {
    const std::string msg = test::error_of([&] { read_checkpoint_state(d); });
    EXPECT_TRUE(contains(msg, "state.json: iteration 20 does not match the directory's iteration 40")) << msg;
  }
  auto fresh = make_model(2);
  EXPECT_TRUE(contains(test::error_of([&] { load_checkpoint_tensors(ck, *fresh, nullptr); }), "iteration 20"));
  // A directory that is not named iter_N (a copy kept under another name) has only state.json to go by.
  fs::copy(ck, tmp / "best");
  EXPECT_EQ(read_checkpoint_state(tmp / "best").iteration, 20);
}

// ---- through pretrain_difflm ---------------------------------------------------------------------------

class CheckpointDirProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(test::binary_path("pretrain_difflm"))) GTEST_SKIP() << "pretrain_difflm not built";
    data_ = test::make_counting_dataset(tmp_.str(), 60);
    base_ = test::tiny_difflm_flags(data_);
  }
  test::ChildResult train(const std::vector<std::string>& extra, const std::string& log = "train.log") {
    return test::run_binary("pretrain_difflm", plus(base_, extra), tmp_ / log);
  }
  test::TempDir tmp_;
  std::string data_;
  std::vector<std::string> base_;
};

TEST_F(CheckpointDirProgram, MissingPointerResumesInsteadOfStartingOver) {
  const std::string save = tmp_ / "ckpt";
  auto r = train({"--train-iters", "2", "--save-interval", "1", "--save", save});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  fs::remove(save + "/" + kPointer);
  const auto before = checksums_under(save);
  r = train({"--train-iters", "3", "--save-interval", "1", "--load", save, "--save", save}, "resume.log");
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  EXPECT_TRUE(contains(r.output, "loaded checkpoint " + save + "/iter_0000002 (iteration 2")) << r.output;
  EXPECT_FALSE(contains(r.output, "iteration        1/")) << "it started over\n" << r.output;
  const auto after = checksums_under(save);
  for (const auto& [file, sum] : before) {
    if (file.rfind("iter_", 0) == 0) {
      EXPECT_EQ(after.at(file), sum) << file;
    }
  }
  EXPECT_EQ(resolve_checkpoint_dir(save), save + "/iter_0000003");
}

TEST_F(CheckpointDirProgram, MissingPointerAndOnlyIncompleteCheckpointsIsRefused) {
  const std::string save = tmp_ / "ckpt";
  auto r = train({"--train-iters", "1", "--save", save});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  fs::remove(save + "/" + kPointer);
  fs::resize_file(save + "/iter_0000001/optimizer.safetensors", 64);
  const auto before = checksums_under(save);
  r = train({"--train-iters", "2", "--load", save, "--save", save}, "resume.log");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_TRUE(contains(r.output, "pretrain_difflm: error: " + save + ": no " + kPointer)) << r.output;
  EXPECT_TRUE(contains(r.output, "optimizer.safetensors: checksum mismatch")) << r.output;
  EXPECT_EQ(checksums_under(save), before);
}

TEST_F(CheckpointDirProgram, StateJsonIterationContradictingTheDirectoryIsRefused) {
  const std::string save = tmp_ / "ckpt";
  auto r = train({"--train-iters", "4", "--save-interval", "2", "--save", save});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  // state.json (not covered by the checksums) rewritten to say iteration 2 in iter_0000004.
  set_state_iteration(save + "/iter_0000004", 2);
  const auto before = checksums_under(save);
  r = train({"--train-iters", "6", "--save-interval", "2", "--load", save, "--save", save}, "resume.log");
  EXPECT_CLEAN_ERROR_EXIT(r);
  EXPECT_TRUE(contains(r.output, save + "/iter_0000004/state.json: iteration 2 does not match the directory's iteration 4"))
      << r.output;
  EXPECT_EQ(checksums_under(save), before);
}

TEST_F(CheckpointDirProgram, NewRunRefusesASaveDirectoryHoldingCheckpoints) {
  const std::string save = tmp_ / "ckpt";
  auto r = train({"--train-iters", "2", "--save", save});
  ASSERT_TRUE(r.exited && r.exit_code == 0) << r.output;
  const auto before = checksums_under(save);
  struct Case {
    std::string name;
    std::vector<std::string> flags;
  };
  // A different run with the same --save; a run loading elsewhere; a finetune from that directory
  // into itself (iteration 0 again, so it would replace iter_0000002).
  const std::vector<Case> cases = {
      {"no --load", {"--weight-decay", "0.05"}},
      {"--load elsewhere", {"--load", tmp_ / "nothing_here"}},
      {"--finetune", {"--load", save, "--finetune"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    r = train(plus({"--train-iters", "2", "--save", save}, c.flags), "again.log");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_TRUE(contains(r.output, "error: --save " + save + " already holds checkpoints (iterations 2)")) << r.output;
    EXPECT_FALSE(contains(r.output, "iteration        1/")) << "it trained\n" << r.output;
    EXPECT_EQ(checksums_under(save), before);
  }
  // Resuming that directory is what the message asks for, and works, also through --load naming the
  // checkpoint directory itself.
  r = train({"--train-iters", "3", "--load", save, "--save", save}, "resume.log");
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.output;
  r = train({"--train-iters", "4", "--load", save + "/iter_0000003/", "--save", save}, "resume.log");
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.output;
}

TEST_F(CheckpointDirProgram, UnusableSaveOrLoadIsRefusedBeforeTraining) {
  const std::string file = tmp_ / "a_file";
  write_file_atomic(file, "not a directory\n");
  struct Case {
    std::vector<std::string> flags;
    std::string error;
  };
  std::vector<Case> cases = {
      {{"--save", file + "/ckpt"}, "--save " + file + "/ckpt: cannot create the directory ("},
      {{"--save", file}, "--save " + file + ": cannot create"},
      {{"--load", file + "/ckpt"}, "--load " + file + "/ckpt: a component of the path is not a directory"},
      {{"--load", file}, "--load " + file + ": not a directory"},
  };
  // chmod does not stop root: the permission cases run only for other users.
  if (::geteuid() != 0) {
    const std::string ro = tmp_ / "read_only";
    fs::create_directories(ro);
    ::chmod(ro.c_str(), 0555);
    cases.push_back({{"--save", ro + "/ckpt"}, "--save " + ro + "/ckpt: cannot create the directory (Permission denied)"});
    cases.push_back({{"--save", ro}, "--save " + ro + ": cannot create files there (Permission denied)"});
  }
  for (const Case& c : cases) {
    SCOPED_TRACE(c.error);
    const auto r = train(plus({"--train-iters", "1"}, c.flags), "bad.log");
    EXPECT_CLEAN_ERROR_EXIT(r);
    EXPECT_TRUE(contains(r.output, "pretrain_difflm: error: " + c.error)) << r.output;
    EXPECT_FALSE(contains(r.output, "iteration        1/")) << "it trained\n" << r.output;
  }
  if (::geteuid() != 0) ::chmod((tmp_ / "read_only").c_str(), 0755);
}
