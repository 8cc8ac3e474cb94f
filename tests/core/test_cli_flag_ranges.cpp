// CliFlags' number ranges: NaN and infinities refused by default, each range's ends, the message
// naming the flag and the range, defaults left unchecked, and help() showing the range.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/cli_flags.h"
#include "core/error.h"

namespace megadlm {
namespace {

std::string parse_error(CliFlags& f, const std::vector<std::string>& args) {
  try {
    f.parse(args);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CliFlagRange, ContainsAndText) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  EXPECT_TRUE(at_least(0).contains(0));
  EXPECT_FALSE(at_least(0).contains(-1e-300));
  EXPECT_FALSE(above(0).contains(0));
  EXPECT_TRUE(closed(0, 1).contains(1));
  EXPECT_FALSE(closed_open(0, 1).contains(1));
  EXPECT_FALSE(open_closed(0, 1).contains(0));
  EXPECT_TRUE(open_closed(0, 1).contains(1));
  for (const FlagRange& r : {any_finite(), at_least(0), closed(-inf, inf)}) {
    EXPECT_FALSE(r.contains(nan));
    EXPECT_FALSE(r.contains(inf));
  }
  FlagRange unbounded = at_least(0);
  unbounded.allow_inf = true;
  EXPECT_TRUE(unbounded.contains(inf));
  EXPECT_FALSE(unbounded.contains(nan));
  EXPECT_EQ(at_least(0).text(), ">= 0");
  EXPECT_EQ(above(0).text(), "> 0");
  EXPECT_EQ(closed_open(0, 1).text(), "in [0, 1)");
  EXPECT_EQ(open_closed(0, 1).text(), "in (0, 1]");
  EXPECT_EQ(any_finite().text(), "any number");
}

TEST(CliFlagRange, ParseRefusesValuesOutsideAndNamesTheFlag) {
  auto make = [] {
    CliFlags f("prog", "");
    f.add_double("plain", 0.5, "no range given: finite only");
    f.add_double("rate", 0.1, "a rate", at_least(0));
    f.add_double("p", 1.0, "a probability", open_closed(0, 1));
    f.add_int("count", 1, "a count", at_least(1));
    f.add_int("sentinel", -1, "-1 = unset by default", at_least(0));
    return f;
  };
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--plain", "nan"}, "--plain must be a finite number (any number), got 'nan'"},
      {{"--plain", "-inf"}, "--plain must be a finite number (any number), got '-inf'"},
      {{"--rate", "-0.5"}, "--rate must be >= 0, got '-0.5'"},
      {{"--rate", "inf"}, "--rate must be a finite number (>= 0), got 'inf'"},
      {{"--p", "0"}, "--p must be in (0, 1], got '0'"},
      {{"--p=1.5"}, "--p must be in (0, 1], got '1.5'"},
      {{"--count", "0"}, "--count must be >= 1, got '0'"},
      {{"--sentinel", "-1"}, "--sentinel must be >= 0, got '-1'"},
  };
  for (const Case& c : cases) {
    CliFlags f = make();
    EXPECT_EQ(parse_error(f, c.args), c.message);
  }
  CliFlags f = make();
  EXPECT_EQ(parse_error(f, {"--plain", "-3", "--rate", "0", "--p", "1", "--count", "7"}), "");
  EXPECT_EQ(f.get_double("plain"), -3);
  EXPECT_EQ(f.get_int("sentinel"), -1);  // the default is not checked against the range
  const std::string help = f.help();
  EXPECT_NE(help.find("a probability [in (0, 1]]"), std::string::npos) << help;
  EXPECT_NE(help.find("a count [>= 1]"), std::string::npos) << help;
}

}  // namespace
}  // namespace megadlm
