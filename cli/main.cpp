// ccc: the collective schedule compiler's command line. (Subcommands land with their passes.)
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "--version") == 0) {
    std::puts("ccc 0.1.0");
    return 0;
  }
  std::fputs("usage: ccc --version\n", stderr);
  return 2;
}
