// $CCC_DEBUG=INFO: ccc says on stderr what it chose and why, one line per event ("ccc INFO:
// ..."), as NCCL_DEBUG=INFO does: the NVRTC it loaded, each communicator's topology, each
// kernel choice.
#pragma once

#include <string>

namespace ccc {

bool debug_info_on();                     // $CCC_DEBUG is INFO (read once)
void debug_info(const std::string& line);  // "ccc INFO: <line>" on stderr when on

}  // namespace ccc
