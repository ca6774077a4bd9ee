#include "call_gate.h"

#include <nanobind/nanobind.h>

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <exception>
#include <thread>

#include "ccc/communicator.h"  // ccc::Error

namespace nb = nanobind;

namespace ccc::python {

CallGate::Call::Call(CallGate& gate, bool one_at_a_time) : gate_(gate), exclusive_(one_at_a_time) {
  std::lock_guard lock(gate.mutex_);
  if (gate.closed_) throw Error(ErrorKind::InvalidUsage, "communicator used after destroy");
  if (one_at_a_time && gate.exclusive_inside_ > 0)
    throw Error(ErrorKind::InvalidUsage,
                "another thread is inside a collective of this rank: issue a rank's collectives from one thread "
                "(from several, the peers would pair them up in the order they happen to arrive), as with NCCL");
  ++gate.inside_;
  if (one_at_a_time) ++gate.exclusive_inside_;
}

CallGate::Call::~Call() {
  {
    std::lock_guard lock(gate_.mutex_);
    --gate_.inside_;
    if (exclusive_) --gate_.exclusive_inside_;
  }
  gate_.idle_.notify_all();
}

bool CallGate::close(const std::function<void()>& wake) {
  std::unique_lock lock(mutex_);
  if (closed_) return false;
  closed_ = true;
  if (inside_ > 0) {
    lock.unlock();
    wake();
    lock.lock();
  }
  idle_.wait(lock, [&] { return inside_ == 0; });
  return true;
}

namespace {

// Ctrl-C: the signal handler may only post a semaphore and touch lock-free atomics (both
// async-signal-safe) and chain to Python's handler (which only sets Python's flag); a watcher
// thread, started once per process, does the aborting. g_abort is what to call, set only while a
// main-thread call runs; the mutex keeps the call (and so its communicator) alive while the
// watcher uses it. Each watched call has a generation of its own: a wake-up meant for an earlier
// call (a second Ctrl-C just after the first call ended) does not abort a later one.
std::mutex g_abort_mutex;
const std::function<void()>* g_abort = nullptr;
std::atomic<unsigned long> g_call{0};         // the watched call's generation (0: none)
std::atomic<unsigned long> g_signalled{0};    // the generation the last SIGINT arrived in
static_assert(std::atomic<unsigned long>::is_always_lock_free, "read and written by a signal handler");
sem_t g_wake;
pid_t g_watcher_process = 0;
struct sigaction g_python_handler;
unsigned long g_main_thread = 0;

void on_sigint(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  g_signalled = g_call.load();
  sem_post(&g_wake);
  if (g_python_handler.sa_flags & SA_SIGINFO)
    g_python_handler.sa_sigaction(sig, info, context);
  else
    g_python_handler.sa_handler(sig);
  errno = saved_errno;
}

void watch() {
  for (;;) {
    if (sem_wait(&g_wake) != 0) continue;  // EINTR
    std::lock_guard lock(g_abort_mutex);
    if (g_abort == nullptr || g_signalled != g_call) continue;
    try {
      (*g_abort)();
    } catch (...) {
      // The abort only shortens the wait; the call still ends at its timeout.
    }
  }
}

bool is_python_handler(const struct sigaction& a) {
  if (a.sa_flags & SA_SIGINFO) return a.sa_sigaction != nullptr && a.sa_sigaction != on_sigint;
  return a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN;
}

// fork(): the child gets the mutex as the forking thread saw it (the watcher may hold it), the
// semaphore but no watcher, and, if a call was running, this module's handler. The mutex is held
// across the fork so that it is consistent on both sides; the child puts Python's handler back
// and starts its own watcher when it first needs one.
void before_fork() { g_abort_mutex.lock(); }
void after_fork_in_parent() { g_abort_mutex.unlock(); }
void after_fork_in_child() {
  g_abort_mutex.unlock();
  g_abort = nullptr;
  g_call = 0;
  struct sigaction current {};
  if (sigaction(SIGINT, nullptr, &current) == 0 && (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == on_sigint)
    sigaction(SIGINT, &g_python_handler, nullptr);
}

// In a process forked after the watcher started, the copy has no thread: start another.
bool start_watcher() {
  if (g_watcher_process == ::getpid()) return true;
  if (g_watcher_process != 0) sem_destroy(&g_wake);  // the parent's; no thread of this process waits on it
  else pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
  if (sem_init(&g_wake, 0, 0) != 0) return false;
  try {
    std::thread(watch).detach();
  } catch (const std::system_error&) {
    return false;
  }
  g_watcher_process = ::getpid();
  return true;
}

// Ends a watched call: Python's handler back, the watcher told the call is over.
void unwatch(const struct sigaction& python) {
  sigaction(SIGINT, &python, nullptr);
  std::lock_guard lock(g_abort_mutex);
  g_abort = nullptr;
  g_call = 0;
}

}  // namespace

void remember_main_thread(unsigned long ident) { g_main_thread = ident; }

void run_interruptible(const std::function<void()>& body, const std::function<void()>& abort) {
  struct sigaction python {};
  const bool watched = PyThread_get_thread_ident() == g_main_thread && sigaction(SIGINT, nullptr, &python) == 0 &&
                       is_python_handler(python) && start_watcher();
  if (!watched) {
    nb::gil_scoped_release release;
    body();
    return;
  }
  static unsigned long generations = 0;  // main thread only
  {
    std::lock_guard lock(g_abort_mutex);
    while (sem_trywait(&g_wake) == 0) {
    }  // wake-ups of calls that are over
    g_python_handler = python;
    g_abort = &abort;
    g_call = ++generations == 0 ? ++generations : generations;
  }
  struct sigaction ours {};
  ours.sa_sigaction = on_sigint;
  // Python's flags (SA_ONSTACK), as a handler of our own kind.
  ours.sa_flags = (python.sa_flags & ~(SA_SIGINFO | SA_RESETHAND)) | SA_SIGINFO;
  sigemptyset(&ours.sa_mask);
  sigaction(SIGINT, &ours, nullptr);
  // A Ctrl-C that came before the handler was in place (while the arguments were converted) is
  // Python's alone: raise it now rather than start a call nothing would interrupt.
  if (PyErr_CheckSignals() != 0) {
    unwatch(python);
    throw nb::python_error();
  }
  std::exception_ptr failure;
  {
    nb::gil_scoped_release release;
    try {
      body();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  const bool interrupted = g_signalled == g_call;
  unwatch(python);
  if (interrupted && PyErr_CheckSignals() != 0) throw nb::python_error();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace ccc::python
