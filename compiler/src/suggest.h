// "Did you mean": the known name closest to a misspelt one.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ccc {

// The candidate closest to `name` by edit distance (insertions, deletions, substitutions and
// swaps of neighbours, ignoring case), if one is close enough to be a typo of it: for a name of
// one character only a change of case, else at most one edit up to 4 characters, two up to 8,
// three beyond. Ties go to the first candidate; names over 32 characters, and candidates past
// the first 4096, are left out (hostile input costs bounded time).
std::optional<std::string> closest_name(std::string_view name, const std::vector<std::string>& candidates);

// " (did you mean 'X'?)" for closest_name's answer, or "".
std::string did_you_mean(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace ccc
