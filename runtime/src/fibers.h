// Emulated GPU threads as fibers (Boost.Context): each runs on a stack of its own and switches
// only to and from the scheduler that resumes it, on the scheduler's host thread. Host
// emulation's thread blocks (host_block.h) and the simulator (sim_engine.h) run kernels' threads
// on them. Stacks come from a process-wide pool, each with a guard page; AddressSanitizer and
// ThreadSanitizer are told of every switch.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

namespace ccc {

class Fibers {
 public:
  // Up to `count` fibers: as many as stacks can be had (perhaps none).
  explicit Fibers(size_t count);
  ~Fibers();  // every started fiber must have finished
  Fibers(const Fibers&) = delete;
  Fibers& operator=(const Fibers&) = delete;

  size_t size() const;
  // Fiber i runs `body` from its first resume. `body` must not throw.
  void start(size_t i, std::function<void()> body);
  // Runs fiber i until it suspends (true) or its body has returned (false). From the scheduler's
  // host thread, never from a fiber.
  bool resume(size_t i);
  // From inside fiber i: gives the turn back to the scheduler until it resumes fiber i again.
  void suspend(size_t i);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ccc
