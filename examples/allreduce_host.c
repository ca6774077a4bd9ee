/* The C API in a few lines: an allreduce over 4 ranks on the host backend, the way a program
 * would call NCCL (one communicator handle per rank, one call per rank).
 * Build: part of the ccc CMake project (target ccc_example_allreduce_host). */
#include <stdio.h>

#include "ccc/ccc.h"

#define NRANKS 4
#define COUNT 1000

static int check(cccResult_t r, cccComm_t comm, const char* what) {
  if (r == cccSuccess) return 0;
  fprintf(stderr, "%s: %s: %s\n", what, cccGetErrorString(r), cccGetLastError(comm));
  return 1;
}

int main(void) {
  static float data[NRANKS][COUNT];
  cccComm_t comms[NRANKS];
  if (check(cccCommInitAllHost(comms, NRANKS), NULL, "cccCommInitAllHost")) return 1;
  for (int r = 0; r < NRANKS; ++r)
    for (int i = 0; i < COUNT; ++i) data[r][i] = (float)(r + 1);
  /* In place: each rank's buffer is both input and output. */
  for (int r = 0; r < NRANKS; ++r)
    if (check(cccAllReduce(data[r], data[r], COUNT, cccFloat32, cccSum, comms[r], NULL), comms[r], "cccAllReduce"))
      return 1;
  /* Each call queued its rank's part and returned; wait for each rank's work. */
  for (int r = 0; r < NRANKS; ++r)
    if (check(cccCommSynchronize(comms[r]), comms[r], "cccCommSynchronize")) return 1;
  int wrong = 0;
  for (int r = 0; r < NRANKS; ++r)
    for (int i = 0; i < COUNT; ++i) wrong += data[r][i] != 10.0f; /* 1 + 2 + 3 + 4 */
  for (int r = 0; r < NRANKS; ++r) cccCommDestroy(comms[r]);
  printf("allreduce of %d floats over %d host ranks: %s\n", COUNT, NRANKS, wrong ? "WRONG" : "ok");
  return wrong != 0;
}
