#include "core/cli_flags.h"

#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace megadlm {

namespace {

bool is_flag_token(const std::string& s) { return s.size() > 2 && s[0] == '-' && s[1] == '-'; }

int64_t parse_int(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE)
    fail("--", flag, " expects an integer, got '", v, "'");
  return x;
}

double parse_double(const std::string& flag, const std::string& v) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE)
    fail("--", flag, " expects a number, got '", v, "'");
  return x;
}

std::string number_text(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Refuses a value outside the flag's range, naming the flag, the range and the value as given.
void check_range(const std::string& flag, const FlagRange& r, double v, const std::string& given) {
  if (r.contains(v)) return;
  if (std::isnan(v) || (std::isinf(v) && !r.allow_inf))
    fail("--", flag, " must be a finite number (", r.text(), "), got '", given, "'");
  fail("--", flag, " must be ", r.text(), ", got '", given, "'");
}

bool parse_bool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  fail("--", flag, " expects true or false, got '", v, "'");
}

}  // namespace

bool FlagRange::contains(double v) const {
  if (std::isnan(v) || (std::isinf(v) && !allow_inf)) return false;
  const bool lo_ok = lo_open ? v > lo : v >= lo;
  const bool hi_ok = hi_open ? v < hi : v <= hi;
  return lo_ok && hi_ok;
}

std::string FlagRange::text() const {
  const bool has_lo = !std::isinf(lo), has_hi = !std::isinf(hi);
  if (has_lo && has_hi)
    return "in " + std::string(lo_open ? "(" : "[") + number_text(lo) + ", " + number_text(hi) + (hi_open ? ")" : "]");
  if (has_lo) return std::string(lo_open ? "> " : ">= ") + number_text(lo);
  if (has_hi) return std::string(hi_open ? "< " : "<= ") + number_text(hi);
  return "any number";
}

FlagRange at_least(double lo) {
  FlagRange r;
  r.lo = lo;
  return r;
}
FlagRange above(double lo) {
  FlagRange r = at_least(lo);
  r.lo_open = true;
  return r;
}
FlagRange closed(double lo, double hi) {
  FlagRange r = at_least(lo);
  r.hi = hi;
  return r;
}
FlagRange closed_open(double lo, double hi) {
  FlagRange r = closed(lo, hi);
  r.hi_open = true;
  return r;
}
FlagRange open_closed(double lo, double hi) {
  FlagRange r = closed(lo, hi);
  r.lo_open = true;
  return r;
}

CliFlags::CliFlags(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void CliFlags::declare(const std::string& name, Kind kind, std::vector<std::string> def, const std::string& help,
                       bool required, const FlagRange& range) {
  MEGADLM_CHECK(!name.empty() && name[0] != '-', "flag names are declared without dashes: '", name, "'");
  MEGADLM_CHECK(!flags_.count(name), "flag --", name, " declared twice");
  Flag f;
  f.kind = kind;
  f.help = help;
  f.required = required;
  f.values = std::move(def);
  f.range = range;
  flags_.emplace(name, std::move(f));
  order_.push_back(name);
}

void CliFlags::add_string(const std::string& name, const std::string& def, const std::string& help, bool required) {
  declare(name, Kind::String, {def}, help, required);
}
void CliFlags::add_int(const std::string& name, int64_t def, const std::string& help, bool required) {
  add_int(name, def, help, FlagRange{}, required);
}
void CliFlags::add_int(const std::string& name, int64_t def, const std::string& help, const FlagRange& range,
                       bool required) {
  declare(name, Kind::Int, {std::to_string(def)}, help, required, range);
}
void CliFlags::add_double(const std::string& name, double def, const std::string& help, bool required) {
  add_double(name, def, help, FlagRange{}, required);
}
void CliFlags::add_double(const std::string& name, double def, const std::string& help, const FlagRange& range,
                          bool required) {
  declare(name, Kind::Double, {number_text(def)}, help, required, range);
}
void CliFlags::add_bool(const std::string& name, const std::string& help) {
  declare(name, Kind::Bool, {"false"}, help, false);
}
void CliFlags::add_list(const std::string& name, const std::vector<std::string>& def, const std::string& help,
                        bool required) {
  declare(name, Kind::List, def, help, required);
}

void CliFlags::parse(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  parse(args);
}

void CliFlags::parse(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& tok = args[i];
    if (tok == "--help" || tok == "-h") {
      help_requested_ = true;
      continue;
    }
    if (!is_flag_token(tok)) fail("unexpected argument '", tok, "' (flags start with --; see --help)");
    std::string name = tok.substr(2), inline_value;
    bool has_inline = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_inline = true;
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) fail("unknown flag --", name, " (see --help)");
    Flag& f = it->second;
    if (f.given && f.kind != Kind::List) fail("flag --", name, " given twice");
    std::vector<std::string> values;
    if (has_inline) {
      values.push_back(inline_value);
    } else if (f.kind == Kind::Bool) {
      values.push_back("true");
    } else if (f.kind == Kind::List) {
      while (i + 1 < args.size() && !is_flag_token(args[i + 1])) values.push_back(args[++i]);
    } else {
      // A value may itself start with '-' (a negative number) but not with "--".
      if (i + 1 >= args.size() || is_flag_token(args[i + 1])) fail("flag --", name, " expects a value");
      values.push_back(args[++i]);
    }
    if (f.kind == Kind::List && values.empty()) fail("flag --", name, " expects at least one value");
    switch (f.kind) {
      case Kind::Int: check_range(name, f.range, static_cast<double>(parse_int(name, values[0])), values[0]); break;
      case Kind::Double: check_range(name, f.range, parse_double(name, values[0]), values[0]); break;
      case Kind::Bool: values[0] = parse_bool(name, values[0]) ? "true" : "false"; break;
      default: break;
    }
    if (f.kind == Kind::List && f.given) {
      f.values.insert(f.values.end(), values.begin(), values.end());  // repeated list flags accumulate
    } else {
      f.values = std::move(values);
    }
    f.given = true;
  }
  if (help_requested_) return;  // do not complain about missing flags when help was asked for
  for (const std::string& name : order_) {
    const Flag& f = flags_.at(name);
    if (f.required && !f.given) fail("missing required flag --", name, " (see --help)");
  }
}

std::string CliFlags::help() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [flags]\n";
  if (!description_.empty()) os << description_ << "\n";
  os << "\nflags:\n";
  for (const std::string& name : order_) {
    const Flag& f = flags_.at(name);
    std::string spec = "  --" + name;
    switch (f.kind) {
      case Kind::String: spec += " STR"; break;
      case Kind::Int: spec += " INT"; break;
      case Kind::Double: spec += " NUM"; break;
      case Kind::List: spec += " VALUE..."; break;
      case Kind::Bool: break;
    }
    os << spec;
    if (spec.size() < 30) os << std::string(30 - spec.size(), ' ');
    else os << "  ";
    os << f.help;
    const bool numeric = f.kind == Kind::Int || f.kind == Kind::Double;
    if (numeric && (!std::isinf(f.range.lo) || !std::isinf(f.range.hi))) os << " [" << f.range.text() << "]";
    if (f.required) {
      os << " (required)";
    } else if (f.kind != Kind::Bool) {
      std::string def;
      for (size_t k = 0; k < f.values.size(); ++k) def += (k ? " " : "") + f.values[k];
      if (!def.empty()) os << " (default: " << def << ")";
    }
    os << "\n";
  }
  os << "  --help" << std::string(30 - 8, ' ') << "print this help\n";
  return os.str();
}

const CliFlags::Flag& CliFlags::lookup(const std::string& name, Kind kind) const {
  auto it = flags_.find(name);
  MEGADLM_CHECK(it != flags_.end(), "flag --", name, " was never declared");
  MEGADLM_CHECK(it->second.kind == kind, "flag --", name, " read as the wrong type");
  return it->second;
}

bool CliFlags::given(const std::string& name) const {
  auto it = flags_.find(name);
  MEGADLM_CHECK(it != flags_.end(), "flag --", name, " was never declared");
  return it->second.given;
}

std::string CliFlags::get_string(const std::string& name) const { return lookup(name, Kind::String).values.at(0); }
int64_t CliFlags::get_int(const std::string& name) const { return parse_int(name, lookup(name, Kind::Int).values.at(0)); }
double CliFlags::get_double(const std::string& name) const {
  return parse_double(name, lookup(name, Kind::Double).values.at(0));
}
bool CliFlags::get_bool(const std::string& name) const { return lookup(name, Kind::Bool).values.at(0) == "true"; }
std::vector<std::string> CliFlags::get_list(const std::string& name) const { return lookup(name, Kind::List).values; }

std::vector<std::pair<std::string, std::string>> CliFlags::canonical_values() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(order_.size());
  for (const std::string& name : order_) {
    const Flag& f = flags_.at(name);
    std::string v;
    switch (f.kind) {
      case Kind::Int: v = std::to_string(get_int(name)); break;
      case Kind::Double: {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", get_double(name));
        v = buf;
        break;
      }
      default:
        for (size_t k = 0; k < f.values.size(); ++k) v += (k ? " " : "") + f.values[k];
    }
    out.emplace_back(name, std::move(v));
  }
  return out;
}

}  // namespace megadlm
