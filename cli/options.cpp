#include "options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>

#include "suggest.h"

namespace ccc::cli {

std::optional<std::string> ParsedArgs::get(const std::string& name) const {
  auto it = values.find(name);
  if (it == values.end()) return std::nullopt;
  return it->second;
}

std::optional<ParsedArgs> parse_args(const std::vector<std::string>& args, const std::vector<OptionSpec>& specs,
                                     std::string& error) {
  ParsedArgs parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 2 || a[0] != '-') {
      parsed.positional.push_back(a);
      continue;
    }
    std::string name = a;
    std::optional<std::string> inline_value;
    if (size_t eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
      name = a.substr(0, eq);
      inline_value = a.substr(eq + 1);
    }
    const OptionSpec* spec = nullptr;
    for (const auto& s : specs)
      if (s.name == name) spec = &s;
    if (!spec) {
      std::vector<std::string> names;
      for (const auto& s : specs) names.push_back(s.name);
      error = fmt::format("unknown option '{}'{}", name, did_you_mean(name, names));
      return std::nullopt;
    }
    if (parsed.has(name)) {
      error = fmt::format("option '{}' is given more than once", name);
      return std::nullopt;
    }
    if (spec->value.empty()) {
      if (inline_value) {
        error = fmt::format("option '{}' takes no value", name);
        return std::nullopt;
      }
      parsed.values[name] = "";
    } else if (inline_value) {
      parsed.values[name] = *inline_value;
    } else if (i + 1 < args.size()) {
      parsed.values[name] = args[++i];
    } else {
      error = fmt::format("option '{}' needs a value ({})", name, spec->value);
      return std::nullopt;
    }
  }
  return parsed;
}

std::string format_options(const std::vector<OptionSpec>& specs) {
  std::string out;
  for (const auto& s : specs) {
    std::string left = s.value.empty() ? s.name : s.name + " " + s.value;
    out += fmt::format("  {:<20} {}\n", left, s.help);
  }
  return out;
}

std::optional<int> parse_int(const std::string& text, int lo, int hi) {
  int value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < lo || value > hi) return std::nullopt;
  return value;
}

std::string unknown_value(const std::string& option, const std::string& text, const std::vector<std::string>& names) {
  return fmt::format("unknown {} '{}'{}; one of: {}", option, text, did_you_mean(text, names), fmt::join(names, ", "));
}

}  // namespace ccc::cli
