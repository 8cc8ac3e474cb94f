#pragma once
// A small command-line flag parser for the data tools (and any app that wants it), in Megatron's
// style: `--name value`, `--name=value`, list flags taking every following value up to the next
// `--flag` (`--json-keys text title`), and boolean switches (`--append-eod`, or `--strict=false`).
// Unknown flags, missing values, malformed numbers and numbers outside a flag's range are Errors that
// name the flag; `--help` (or -h) is recorded so that the program can print help() and exit 0.
// Number flags refuse NaN and infinities unless their FlagRange allows infinity.
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace megadlm {

// The values a number flag accepts: an interval with open or closed ends (an infinite end means
// unbounded on that side). A value given on the command line outside it is an Error naming the flag
// and the interval; defaults are not checked (a default may be an "unset" sentinel).
struct FlagRange {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool allow_inf = false;  // infinities pass (when inside the interval); NaN never does

  bool contains(double v) const;
  std::string text() const;  // ">= 0", "> 0", "in [0, 1)", "any number"
};
FlagRange at_least(double lo);                 // [lo, inf)
FlagRange above(double lo);                    // (lo, inf)
FlagRange closed(double lo, double hi);        // [lo, hi]
FlagRange closed_open(double lo, double hi);   // [lo, hi)
FlagRange open_closed(double lo, double hi);   // (lo, hi]
inline FlagRange any_finite() { return {}; }

class CliFlags {
 public:
  CliFlags(std::string program, std::string description);

  // Declarations. `required` flags must be given; the others default to `def`.
  void add_string(const std::string& name, const std::string& def, const std::string& help, bool required = false);
  void add_int(const std::string& name, int64_t def, const std::string& help, bool required = false);
  void add_int(const std::string& name, int64_t def, const std::string& help, const FlagRange& range,
               bool required = false);
  void add_double(const std::string& name, double def, const std::string& help, bool required = false);
  void add_double(const std::string& name, double def, const std::string& help, const FlagRange& range,
                  bool required = false);
  void add_bool(const std::string& name, const std::string& help);  // a switch, false unless given
  void add_list(const std::string& name, const std::vector<std::string>& def, const std::string& help,
                bool required = false);

  // Parses argv[1..argc). Throws Error ("unknown flag --x", "--workers expects an integer, got 'y'", ...).
  void parse(int argc, const char* const* argv);
  void parse(const std::vector<std::string>& args);

  bool help_requested() const { return help_requested_; }
  std::string help() const;  // usage line, description and one line per flag

  bool given(const std::string& name) const;  // set on the command line (not just defaulted)
  std::string get_string(const std::string& name) const;
  int64_t get_int(const std::string& name) const;
  double get_double(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  std::vector<std::string> get_list(const std::string& name) const;

  // Every declared flag in declaration order with its value spelled canonically ("1e-3" and "0.001"
  // alike, list items joined by spaces), defaults included: what the ranks of one run compare.
  std::vector<std::pair<std::string, std::string>> canonical_values() const;

 private:
  enum class Kind { String, Int, Double, Bool, List };
  struct Flag {
    Kind kind;
    std::string help;
    bool required = false;
    bool given = false;
    std::vector<std::string> values;  // one value except for lists
    FlagRange range;                  // Int and Double flags
  };
  const Flag& lookup(const std::string& name, Kind kind) const;
  void declare(const std::string& name, Kind kind, std::vector<std::string> def, const std::string& help, bool required,
               const FlagRange& range = {});

  std::string program_, description_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;  // declaration order, for help()
  bool help_requested_ = false;
};

}  // namespace megadlm
