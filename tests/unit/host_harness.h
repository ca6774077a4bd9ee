// Test-only host runner for generated kernels: compiles them with the host compiler against the
// host prelude into one shared library, and runs a launch with one std::thread per (rank, channel).
// The production host backend is the runtime's (runtime/src/host_backend*.cpp); this exists so the
// code generator's tests can prove the generated text computes the right answer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../../device/ccc_abi.h"
#include "emit_cuda.h"
#include "host_block.h"

namespace ccc::testing {

using HostEntry = ccc::HostEntry;

// Threads per block where a test does not choose: enough for several waits to be polled by
// threads of their own, few enough to keep the tests quick.
constexpr unsigned kTestBlockThreads = 32;

// ThreadSanitizer keeps 255 thread slots and every fiber takes one: past that it recycles them
// on every switch, and a test of 5 ranks x 2 channels x 512 fibers runs for many minutes. Under
// TSan, blocks run at most 4 threads, which still exercises the fibers and their annotations
// (the switches synchronise, so more fibers show TSan nothing more); elsewhere `threads`.
#if defined(__SANITIZE_THREAD__)
constexpr unsigned tsan_block_threads(unsigned threads) { return threads < 4 ? threads : 4; }
#else
constexpr unsigned tsan_block_threads(unsigned threads) { return threads; }
#endif

class HostLibrary {
 public:
  // Compiles every kernel into one library (each in its own namespace) against the prelude in
  // `prelude_dir`, with the sanitizer the tests are built with; empty error() on success.
  HostLibrary(const std::vector<EmittedKernel>& kernels, const std::string& tag,
              const std::string& prelude_dir = CCC_SOURCE_DIR "/device");
  ~HostLibrary();
  HostLibrary(const HostLibrary&) = delete;
  HostLibrary& operator=(const HostLibrary&) = delete;

  const std::string& error() const { return error_; }
  HostEntry entry(const std::string& kernel_name) const;

 private:
  void* handle_ = nullptr;
  std::string error_;
};

// Every rank's buffers for one collective; allocations padded so a buffer may start `offset`
// bytes into its allocation.
struct HostBuffers {
  // `ll_bytes`: each rank's LL receive slots (EmittedKernel::ll_bytes), zeroed.
  HostBuffers(int nranks, uint64_t bytes, uint64_t scratch_bytes, uint64_t offset, bool in_place, uint64_t ll_bytes = 0);
  // One rank's synchronisation state, as the runtime's backends lay it out (ccc_abi.h).
  struct Sync {
    unsigned long long progress[CCC_MAX_CHANNELS] = {};
    ccc_buffers mailbox[2 * CCC_MAX_CHANNELS] = {};
    unsigned error = CCC_OK;
    std::vector<unsigned long long> inbox;  // [CCC_MAX_CHANNELS][N]
  };
  std::vector<std::vector<unsigned char>> in_alloc, out_alloc, scratch_alloc;
  std::vector<std::vector<unsigned long long>> ll_alloc;  // 8-byte lines
  std::vector<Sync> sync;
  std::vector<ccc_rank_state> state;  // [N] the kernels' fixed table
  std::vector<ccc_buffers> own;       // [N] each rank's buffers for the launch
  std::vector<ccc_epilogue_args> epilogue;  // [N] epilogue kernels' operands (ccc_abi.h), else empty
  unsigned error(int r) const { return sync[r].error; }
  unsigned char* input(int r) const { return static_cast<unsigned char*>(const_cast<void*>(own[r].input)); }
  unsigned char* output(int r) const { return static_cast<unsigned char*>(own[r].output); }
};

// One launch: every (rank, channel) on its own thread, running `threads` threads (fibers), ranks
// in `skip` never started. Returns wall seconds.
double launch_host(HostEntry entry, HostBuffers& b, int channels, uint64_t count, uint64_t timeout_ns,
                   const std::vector<int>& skip = {}, unsigned threads = kTestBlockThreads);

}  // namespace ccc::testing
