// ccc: the collective schedule compiler's command line (the commands live in cli.cpp).
#include <iostream>

#include "cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return ccc::cli::run(args, std::cout, std::cerr);
}
