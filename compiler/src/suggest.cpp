#include "suggest.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace ccc {
namespace {

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

// Optimal string alignment distance, case-insensitive.
size_t distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> closest_name(std::string_view name, const std::vector<std::string>& candidates) {
  // Names past this length are not typed by hand; comparing them would only cost time.
  constexpr size_t kLongest = 64;
  if (name.empty() || name.size() > kLongest) return std::nullopt;
  // One letter is one edit from every other: only a change of case counts there.
  const size_t allowed = name.size() <= 1 ? 0 : name.size() <= 4 ? 1 : name.size() <= 8 ? 2 : 3;
  std::optional<std::string> best;
  size_t best_distance = allowed + 1;
  for (const std::string& c : candidates) {
    if (c.size() > kLongest) continue;
    const size_t d = distance(name, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates) {
  const std::optional<std::string> best = closest_name(name, candidates);
  return best ? fmt::format(" (did you mean '{}'?)", *best) : "";
}

}  // namespace ccc
