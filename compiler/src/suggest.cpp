#include "suggest.h"

#include <algorithm>
#include <array>
#include <cctype>

#include <fmt/format.h>

namespace ccc {
namespace {

// Names longer than this are not typed by hand: they are neither suggested nor given suggestions
// (and the distance below needs no heap).
constexpr size_t kLongest = 32;
// At most this many candidates are compared, so that a schedule with a hundred thousand names in
// scope costs bounded time per suggestion (the parsers' inputs may be hostile).
constexpr size_t kMostCandidates = 4096;

char lower(char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); }

// Optimal string alignment distance, case-insensitive; both at most kLongest long.
size_t distance(std::string_view a, std::string_view b) {
  std::array<size_t, kLongest + 1> before{}, prev{}, row{};  // rows i - 2, i - 1, i
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1;
      row[j] = std::min({prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1]))
        row[j] = std::min(row[j], before[j - 2] + 1);
    }
    before = prev;
    prev = row;
  }
  return prev[b.size()];
}

}  // namespace

std::optional<std::string> closest_name(std::string_view name, const std::vector<std::string>& candidates) {
  if (name.empty() || name.size() > kLongest) return std::nullopt;
  // One letter is one edit from every other: only a change of case counts there.
  const size_t allowed = name.size() <= 1 ? 0 : name.size() <= 4 ? 1 : name.size() <= 8 ? 2 : 3;
  std::optional<std::string> best;
  size_t best_distance = allowed + 1;
  const size_t compared = std::min(candidates.size(), kMostCandidates);
  for (size_t k = 0; k < compared; ++k) {
    const std::string& c = candidates[k];
    if (c.size() > kLongest) continue;
    const size_t gap = c.size() > name.size() ? c.size() - name.size() : name.size() - c.size();
    if (gap >= best_distance) continue;  // at least that many insertions or deletions
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
