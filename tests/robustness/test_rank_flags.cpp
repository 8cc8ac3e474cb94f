// Ranks started with different flags: under mpirun each rank compares its flags with rank 0's at
// start-up, and every rank stops with an error naming the flag and both values, where they would
// otherwise wait in a collective for ever (--train-iters), fail inside MPI naming no flag
// (--hidden-size) or train different replicas without a word (--seed).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "child_process.h"
#include "core/cli_flags.h"
#include "test_util.h"
#include "train/flag_agreement.h"
#include "train_fixture.h"

namespace fs = std::filesystem;
using namespace megadlm;

namespace {

// `mpirun ... -np 1 pretrain_difflm <a> : -np 1 pretrain_difflm <b>`: two ranks, each with its own flags.
std::vector<std::string> two_ranks(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  // The environment is given to each of the two app contexts.
  const std::string asan_options = "ASAN_OPTIONS=" + test::asan_options_for_mpi();
  const std::vector<std::string> rank = {"-x", "OMP_NUM_THREADS=1", "-x", asan_options, "-np", "1",
                                         test::binary_path("pretrain_difflm")};
  std::vector<std::string> args = {"--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "btl",
                                   "self,vader"};
  args = test::plus(test::plus(test::plus(args, rank), a), {":"});
  return test::plus(test::plus(args, rank), b);
}

// `flags` with the value of --name replaced, or the pair appended when absent.
std::vector<std::string> with(std::vector<std::string> flags, const std::string& name, const std::string& value) {
  for (size_t i = 0; i + 1 < flags.size(); ++i)
    if (flags[i] == name) {
      flags[i + 1] = value;
      return flags;
    }
  flags.push_back(name);
  flags.push_back(value);
  return flags;
}

}  // namespace

TEST(RankFlags, CanonicalValuesSpellNumbersOneWay) {
  auto values = [](const std::vector<std::string>& args) {
    CliFlags f("p", "");
    f.add_double("lr", 1e-4, "");
    f.add_int("iters", 10, "");
    f.add_bool("fast", "");
    f.add_list("paths", {"a"}, "");
    f.parse(args);
    return f.canonical_values();
  };
  EXPECT_EQ(values({"--lr", "1e-3"}), values({"--lr", "0.001"}));
  EXPECT_EQ(values({"--iters", "010"}), values({"--iters", "10"}));
  EXPECT_EQ(values({}), values({"--lr", "0.0001", "--iters", "10", "--paths", "a"}));  // defaults count
  EXPECT_NE(values({"--lr", "1e-3"}), values({"--lr", "2e-3"}));
  EXPECT_NE(values({"--fast"}), values({}));
  EXPECT_NE(values({"--paths", "a", "b"}), values({"--paths", "a"}));
  const auto v = values({"--paths", "x", "y", "--fast"});
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0], (std::pair<std::string, std::string>{"lr", "0.0001"}));
  EXPECT_EQ(v[2], (std::pair<std::string, std::string>{"fast", "true"}));
  EXPECT_EQ(v[3], (std::pair<std::string, std::string>{"paths", "x y"}));
}

TEST(RankFlags, FirstDifferingFlag) {
  EXPECT_EQ(first_differing_flag({1, 2, 3}, {1, 2, 3}), 3u);
  EXPECT_EQ(first_differing_flag({1, 5, 6}, {1, 2, 3}), 1u);
  EXPECT_EQ(first_differing_flag({}, {}), 0u);
  EXPECT_NE(test::error_of([] { first_differing_flag({1}, {1, 2}); }).find("different programs"), std::string::npos);
}

TEST(RankFlags, RanksWithDifferentFlagsStopNamingTheFlag) {
  MEGADLM_REQUIRE_BINARY("pretrain_difflm");
  const std::string mpirun = test::find_mpirun();
  if (mpirun.empty()) GTEST_SKIP() << "mpirun not installed (Debian: openmpi-bin)";
  test::TempDir dir;
  const std::string data = test::make_counting_dataset(dir.str(), 40);
  const auto base = test::tiny_difflm_flags(data);
  const auto two_iters = with(base, "--train-iters", "2");
  struct Case {
    std::vector<std::string> rank1;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {with(two_iters, "--train-iters", "3"), "--train-iters differs between ranks: '2' on rank 0, '3' on rank 1"},
      {with(two_iters, "--hidden-size", "64"), "--hidden-size differs between ranks: '32' on rank 0, '64' on rank 1"},
      {with(two_iters, "--seed", "6"), "--seed differs between ranks: '5' on rank 0, '6' on rank 1"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.expected);
    test::ChildOptions opt;
    opt.timeout_s = 60;  // a hang fails the test instead of stalling the suite
    const auto r = test::run_program(mpirun, two_ranks(two_iters, c.rank1), dir / "log.txt", opt);
    EXPECT_TRUE(r.exited) << r.output;
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("pretrain_difflm: error: " + c.expected), std::string::npos) << r.output;
  }
  // The same flags spelled differently are the same run: it trains.
  const auto one_iter = with(base, "--train-iters", "1");
  const auto r = test::run_program(mpirun, two_ranks(one_iter, with(one_iter, "--lr", "0.003")), dir / "log.txt");
  EXPECT_TRUE(r.exited && r.exit_code == 0) << r.output;
}
