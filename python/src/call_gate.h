// What every call of a Python communicator passes through: destroy() against calls in other
// threads, one collective at a time per rank, and Ctrl-C while a collective waits.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>

namespace ccc::python {

// Counts the calls inside a communicator. destroy() closes the gate: later calls are refused,
// the calls inside are woken (`wake`: the communicator's ranks aborted) and waited for, and only
// then does the communicator go, so no call ever runs on a destroyed one.
class CallGate {
 public:
  // A call inside the gate until it goes. `one_at_a_time`: refused while another call is inside
  // (a rank's collectives must be issued from one thread: from two, the peers would pair them up
  // in whatever order they arrive). Throws Error(InvalidUsage) when refused.
  class Call {
   public:
    Call(CallGate& gate, bool one_at_a_time);
    ~Call();
    Call(const Call&) = delete;
    Call& operator=(const Call&) = delete;

   private:
    CallGate& gate_;
    bool exclusive_;
  };

  // Closes the gate and waits for the calls inside, calling `wake` first if there are any. False
  // if it was closed already (by an earlier destroy). Call it without the GIL.
  bool close(const std::function<void()>& wake);

 private:
  std::mutex mutex_;
  std::condition_variable idle_;
  int inside_ = 0;            // every call inside
  int exclusive_inside_ = 0;  // the ones that issue collectives (one_at_a_time)
  bool closed_ = false;
};

// Runs `body` without the GIL. In Python's main thread, while SIGINT has Python's handler, a
// Ctrl-C during `body` calls `abort` at once from a watcher thread (so that a collective waiting
// for a peer ends now, not at its timeout, which may be never), and once `body` has returned the
// KeyboardInterrupt is raised (nb::python_error) in place of whatever `body` threw. Elsewhere,
// `body` alone.
void run_interruptible(const std::function<void()>& body, const std::function<void()>& abort);

// Records the interpreter's main thread (at module import).
void remember_main_thread(unsigned long ident);

}  // namespace ccc::python
