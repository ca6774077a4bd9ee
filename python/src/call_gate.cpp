#include "call_gate.h"

#include <nanobind/nanobind.h>

#include <semaphore.h>
#include <signal.h>
#include <unistd.h>

#include <exception>
#include <thread>

#include "ccc/communicator.h"  // ccc::Error

namespace nb = nanobind;

namespace ccc::python {

CallGate::Call::Call(CallGate& gate, bool one_at_a_time) : gate_(gate) {
  std::lock_guard lock(gate.mutex_);
  if (gate.closed_) throw Error(ErrorKind::InvalidUsage, "communicator used after destroy");
  if (one_at_a_time && gate.inside_ > 0)
    throw Error(ErrorKind::InvalidUsage,
                "another thread is inside a collective of this rank: issue a rank's collectives from one thread "
                "(from several, the peers would pair them up in the order they happen to arrive), as with NCCL");
  ++gate.inside_;
}

CallGate::Call::~Call() {
  {
    std::lock_guard lock(gate_.mutex_);
    --gate_.inside_;
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

// Ctrl-C: the signal handler may only post a semaphore (async-signal-safe) and chain to Python's
// handler (which only sets Python's flag); a watcher thread, started once per process, does the
// aborting. g_abort is what to call, set only while a main-thread call runs; the mutex keeps the
// call (and so its communicator) alive while the watcher uses it.
std::mutex g_abort_mutex;
const std::function<void()>* g_abort = nullptr;
sem_t g_wake;
pid_t g_watcher_process = 0;
struct sigaction g_python_handler;
volatile sig_atomic_t g_interrupted = 0;
unsigned long g_main_thread = 0;

void on_sigint(int sig, siginfo_t* info, void* context) {
  g_interrupted = 1;
  sem_post(&g_wake);
  if (g_python_handler.sa_flags & SA_SIGINFO)
    g_python_handler.sa_sigaction(sig, info, context);
  else
    g_python_handler.sa_handler(sig);
}

void watch() {
  for (;;) {
    if (sem_wait(&g_wake) != 0) continue;  // EINTR
    std::lock_guard lock(g_abort_mutex);
    if (g_abort == nullptr) continue;
    try {
      (*g_abort)();
    } catch (...) {
      // The abort only shortens the wait; the call still ends at its timeout.
    }
  }
}

// In a process forked after the watcher started, the copy has no thread: start another.
bool start_watcher() {
  if (g_watcher_process == ::getpid()) return true;
  if (sem_init(&g_wake, 0, 0) != 0) return false;
  try {
    std::thread(watch).detach();
  } catch (const std::system_error&) {
    return false;
  }
  g_watcher_process = ::getpid();
  return true;
}

bool is_python_handler(const struct sigaction& a) {
  if (a.sa_flags & SA_SIGINFO) return a.sa_sigaction != nullptr && a.sa_sigaction != on_sigint;
  return a.sa_handler != SIG_DFL && a.sa_handler != SIG_IGN;
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
  g_python_handler = python;
  g_interrupted = 0;
  {
    std::lock_guard lock(g_abort_mutex);
    g_abort = &abort;
  }
  struct sigaction ours {};
  ours.sa_sigaction = on_sigint;
  ours.sa_flags = SA_SIGINFO | (python.sa_flags & SA_RESTART);
  sigemptyset(&ours.sa_mask);
  sigaction(SIGINT, &ours, nullptr);
  std::exception_ptr failure;
  {
    nb::gil_scoped_release release;
    try {
      body();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  sigaction(SIGINT, &python, nullptr);
  {
    std::lock_guard lock(g_abort_mutex);
    g_abort = nullptr;
  }
  if (g_interrupted && PyErr_CheckSignals() != 0) throw nb::python_error();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace ccc::python
