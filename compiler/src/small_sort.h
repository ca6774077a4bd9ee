// A stable sort for the short ranges sorted once per (rank, step) -- a few waits, candidates,
// writes or operands, N x steps times (2 M at N = 1024). std::stable_sort allocates a buffer on
// every call; an insertion sort needs none and is as fast on a few dozen elements.
#pragma once

#include <algorithm>
#include <iterator>

namespace ccc {

template <class It, class Less>
void stable_sort_small(It first, It last, Less less) {
  constexpr std::ptrdiff_t kInsertionMax = 32;
  if (last - first > kInsertionMax) {
    std::stable_sort(first, last, less);
    return;
  }
  // Moves an element past its left neighbour only when strictly less: equal ones keep their order.
  for (It i = first; i != last; ++i)
    for (It j = i; j != first && less(*j, *std::prev(j)); --j) std::iter_swap(j, std::prev(j));
}

}  // namespace ccc
