// A small option parser shared by the subcommands: `--name VALUE`, `--name=VALUE`, `-o VALUE`,
// flags, and positional arguments. Anything unknown is a usage error.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ccc::cli {

struct OptionSpec {
  std::string name;   // "--ranks" or "-o"
  std::string value;  // placeholder shown in help ("N"); empty for a flag
  std::string help;
};

struct ParsedArgs {
  std::vector<std::string> positional;
  std::map<std::string, std::string> values;  // option name -> value ("" for flags)
  bool has(const std::string& name) const { return values.count(name) > 0; }
  std::optional<std::string> get(const std::string& name) const;
};

// Parses args against specs; on a usage error returns nullopt and sets `error`.
std::optional<ParsedArgs> parse_args(const std::vector<std::string>& args, const std::vector<OptionSpec>& specs,
                                     std::string& error);

// The options as help lines: "  --ranks N        number of ranks".
std::string format_options(const std::vector<OptionSpec>& specs);

// A whole decimal int in [lo, hi], or nullopt.
std::optional<int> parse_int(const std::string& text, int lo, int hi);

// "unknown OPTION 'TEXT' (did you mean 'X'?); one of: A, B, ...": a name none of `names` is.
std::string unknown_value(const std::string& option, const std::string& text, const std::vector<std::string>& names);

// The member of `values` that `name_of` calls `text`; else nullopt, with unknown_value's
// message in `error`.
template <class T, class Values>
std::optional<T> named_value(const std::string& option, const std::string& text, const Values& values,
                             const char* (*name_of)(T), std::string& error) {
  std::vector<std::string> names;
  for (T v : values) {
    if (text == name_of(v)) return v;
    names.push_back(name_of(v));
  }
  error = unknown_value(option, text, names);
  return std::nullopt;
}

}  // namespace ccc::cli
