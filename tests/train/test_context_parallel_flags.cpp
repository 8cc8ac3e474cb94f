// --context-parallel-size's own checks, made while the flags are parsed (before the sizes are checked
// against the world, so they hold on any launch): the sequence must be two equal chunks per rank, a
// block-causal block must not straddle two chunks.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"
#include "train_fixture.h"

using namespace megadlm;

namespace {

std::string parse_error(const std::vector<std::string>& extra) {
  const std::vector<std::string> flags =
      test::plus(test::plus({"pretrain_difflm"}, test::tiny_difflm_flags("/nonexistent/data")), extra);
  return test::error_of([&] { (void)test::parse_flags(flags); });
}

TEST(ContextParallelFlags, SequenceMustSplitIntoTwoChunksPerRank) {
  // tiny_difflm_flags: --seq-length 16.
  const std::string e = parse_error({"--context-parallel-size", "3"});
  EXPECT_NE(e.find("--seq-length 16"), std::string::npos) << e;
  EXPECT_NE(e.find("--context-parallel-size 3"), std::string::npos) << e;
}

TEST(ContextParallelFlags, BlockMustNotStraddleTwoChunks) {
  // cp 4: chunks of 2 tokens; blocks of 4 would straddle two.
  const std::string e =
      parse_error({"--context-parallel-size", "4", "--attention-mask-type", "block_causal", "--block-length", "4"});
  EXPECT_NE(e.find("--block-length 4"), std::string::npos) << e;
  EXPECT_NE(e.find("chunk of 2 tokens"), std::string::npos) << e;
  // Blocks of 2 fit the chunks: the only error left is the world of one rank.
  const std::string ok =
      parse_error({"--context-parallel-size", "4", "--attention-mask-type", "block_causal", "--block-length", "2"});
  EXPECT_EQ(ok.find("--block-length"), std::string::npos) << ok;
  EXPECT_NE(ok.find("--context-parallel-size 4"), std::string::npos) << ok;
}

}  // namespace
