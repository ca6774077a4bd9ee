// Launch error words (CCC_ERR_* of ccc_abi.h) as text.
#pragma once

#include <string>

namespace ccc {

// "rank 1: timed out waiting for a peer; rank 3: ..." for every rank whose launch error word is
// set; empty when none is.
std::string launch_failures(const unsigned* error_words, int nranks);

}  // namespace ccc
