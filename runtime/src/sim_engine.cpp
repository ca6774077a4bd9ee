#include "sim_engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <queue>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ccc/errors.h"
#include "fibers.h"
#include "host_block.h"

namespace ccc {

// docs/cost_model.md, "The simulator's constants", gives each one's source.
SimConstants default_sim_constants() {
  SimConstants c;
  c.local_load = 250e-9;   // a far-L2 hit: ~490 cycles at 1.98 GHz (GH200, RRZE-HPC gpu-benches)
  c.local_store = 140e-9;  // a near-L2 hit: ~280 cycles at 1.98 GHz (the same measurement)
  c.barrier = 20e-9;       // an estimate (~40 cycles); no published measurement found
  c.issue = 2e-9;          // an estimate: a few instructions
  return c;
}

namespace {

// Virtual time, in picoseconds: integers, so that every run orders and adds them alike.
using Ps = int64_t;
Ps to_ps(double seconds) { return static_cast<Ps>(std::llround(seconds * 1e12)); }

// How long the engine waits (host time) for a rank with nothing queued to queue its next launch
// before it lets virtual time pass the moment that launch would start: ranks that call together
// (one driver thread, or a thread per rank) queue within microseconds of each other.
constexpr std::chrono::milliseconds kLaunchGrace{50};

}  // namespace

struct SimEngine::Impl {
  struct Launch;
  struct Block;

  // A moment on a thread's timeline that something outside it set: its launch began, a wait
  // ended (because of a store), a barrier let it go (because of the last arrival), or a store it
  // made (what a wait of another thread may end on). `cause` is what set it: following causes
  // back from a launch's end gives its critical path.
  struct Mark {
    Ps at = 0;
    const char* what = "";
    int rank = 0, block = 0, thread = 0;
    const void* word = nullptr;  // the word stored or waited on, if any
    mutable std::shared_ptr<const Mark> cause;
    Mark() = default;
    Mark(const Mark&) = default;
    // Unlinks the chain one mark at a time: a long critical path must not recurse on a fiber's stack.
    ~Mark() {
      std::shared_ptr<const Mark> next = std::move(cause);
      while (next != nullptr && next.use_count() == 1) next = std::move(next->cause);
    }
  };
  using MarkPtr = std::shared_ptr<const Mark>;

  // One emulated GPU thread.
  struct Thread {
    ccc_host_thread self{};
    Impl* engine = nullptr;
    Block* block = nullptr;
    uint64_t order = 0;   // ties between equal clocks go by this: (launch, block, thread)
    Ps clock = 0;         // what the thread has done takes it to here
    Ps loads_done = 0;    // its loads in flight return by then
    Ps stores_done = 0;   // its stores so far are visible by then
    enum class State : unsigned char { Ready, Running, Parked, AtBarrier, Finished } state = State::Ready;
    uint64_t parked = 0;  // which parking this is (a wake from an older one is stale)
    struct Polled {
      const void* word;
      Ps at;          // when the load was issued
      uint64_t seen;  // what it read
      int bytes;
    };
    std::vector<Polled> polled;  // the words it loaded since it last parked
    MarkPtr mark;  // the last moment something outside set its clock
  };
  struct Block {
    Launch* launch = nullptr;
    int index = 0;
    Ps free = 0;                     // the block's own data rate (Gpu::channel_bandwidth) is busy until
    Ps arrived = 0;                  // the latest clock of a thread at the barrier
    MarkPtr latest;                  // that thread's arrival
    std::unique_ptr<Fibers> fibers;  // one per thread
    BlockBarrier barrier;
    std::vector<Thread> threads;
    unsigned finished = 0;
    std::map<const void*, std::vector<std::byte>> shared;  // block_shared() arrays
    explicit Block(unsigned n) : barrier(n) {}
  };
  struct Launch {
    int rank = 0;
    HostKernel kernel;
    ccc_launch_args args{};
    int channels = 0;
    Ps end = 0;
    MarkPtr end_mark;  // the thread that ended last, as it ended
    std::vector<std::unique_ptr<Block>> blocks;
    int blocks_left = 0;
  };
  // A queued kernel or host task of one rank.
  struct Work {
    HostKernel kernel;
    ccc_launch_args args{};
    int channels = 0;
    std::function<void()> task;
  };
  struct Rank {
    std::deque<Work> queue;      // front: running, if `running` is set
    std::unique_ptr<Launch> running;
    Ps stream = 0;               // its last work ended then
    MarkPtr end_mark;            // how its last launch ended
    uint64_t queued = 0, done = 0;
    uint64_t launches = 0;       // kernels started
    bool absent = false;         // the engine stopped waiting for its next launch (kLaunchGrace)
  };
  // A word the kernels synchronise through: its values by when they became visible, oldest first
  // (the memory holds the newest; none: every value there is visible), and whose memory it is.
  struct Word {
    struct Value {
      Ps visible;
      uint64_t value;
      MarkPtr store;  // the store that wrote it (null: it was there before)
    };
    std::vector<Value> values;
    int owner = -1;  // the rank; -1: the accessing rank's own
  };
  struct Ready {
    Ps clock;
    uint64_t order;
    Thread* thread;
    bool operator>(const Ready& o) const { return std::tie(clock, order) > std::tie(o.clock, o.order); }
  };

  Topology topology;
  int nranks;
  unsigned block_threads;
  SimConstants constants;
  std::vector<Route> routes;  // [a * nranks + b]: from GPU a to GPU b
  ccc_sim_hooks hooks{};

  std::mutex mutex;               // the queues, stream clocks and placements, with the host threads
  std::condition_variable wake;   // the engine: work was queued, or stop
  std::condition_variable idle;   // waiters: a rank's work finished
  std::vector<Rank> ranks;
  struct Placed {
    uintptr_t end;
    int rank;
    SimMemory kind;
  };
  std::map<uintptr_t, Placed> placed;  // by where each begins
  bool stop = false;
  std::atomic<Ps> latest{0};      // now(): the latest end of any rank's work
  std::thread thread;

  // The engine thread's own state.
  std::priority_queue<Ready, std::vector<Ready>, std::greater<>> ready;
  std::unordered_map<const void*, Word> words;
  std::unordered_map<const void*, std::vector<std::pair<Thread*, uint64_t>>> watchers;
  std::map<std::tuple<int, int, int>, Ps> busy;  // a memory's or fabric port's next free moment
  Ps frontier = 0;  // the clock of the thread that ran last: never decreases while threads live
  MarkPtr latest_end;  // the end of the launch that ended last (under `mutex`)
  uint64_t live_threads = 0;
  uint64_t launches = 0;

  Impl(Topology t, int n, unsigned threads, bool move_data, SimConstants c)
      : topology(std::move(t)), nranks(n), block_threads(std::clamp(threads, 1u, kMaxHostBlockThreads)),
        constants(c), ranks(static_cast<size_t>(n)) {
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b) routes.push_back(route(topology, a, b).value_or(Route{}));
    hooks.load = &Impl::hook_load;
    hooks.store = &Impl::hook_store;
    hooks.record_error = &Impl::hook_record_error;
    hooks.move = &Impl::hook_move;
    hooks.now = &Impl::hook_now;
    hooks.shared = &Impl::hook_shared;
    hooks.move_data = move_data ? 1 : 0;
    thread = std::thread([this] { run(); });
  }

  ~Impl() {
    {
      std::unique_lock lock(mutex);
      idle.wait(lock, [&] {
        return std::all_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.queue.empty(); });
      });
      stop = true;
    }
    wake.notify_all();
    thread.join();
  }

  // ---- costs

  int gpu(int rank) const { return rank; }
  // The word at p, found once per idle period with its owner.
  Word& word(const void* p) {
    auto [it, added] = words.try_emplace(p);
    if (added) {
      std::lock_guard lock(mutex);
      const auto at = reinterpret_cast<uintptr_t>(p);
      auto place = placed.upper_bound(at);
      if (place != placed.begin() && at < std::prev(place)->second.end) it->second.owner = std::prev(place)->second.rank;
    }
    return it->second;
  }
  int owner(const Word& w, const Thread& t) const { return w.owner >= 0 ? w.owner : rank_of(t); }
  // The route from GPU a to GPU b (every pair has one: the constructor validated the topology).
  const Route& route_of(int a, int b) const { return routes[static_cast<size_t>(a * nranks + b)]; }
  // A load by a thread on GPU a of a word in GPU b's memory: request there, value back.
  Ps round_trip(int a, int b) const {
    if (a == b) return to_ps(constants.local_load);
    return 2 * to_ps(route_of(a, b).spec.latency);
  }
  // A store by a thread on GPU a into GPU b's memory, until a load there sees it.
  Ps one_way(int a, int b) const {
    if (a == b) return to_ps(constants.local_store);
    return to_ps(route_of(a, b).spec.latency);
  }
  // `bytes` through resource `key` of `bandwidth` bytes/s, from `t`: when they are through.
  Ps through(const std::tuple<int, int, int>& key, Ps t, double bytes, double bandwidth) {
    Ps& free = busy[key];
    const Ps start = std::max(t, free);
    free = start + to_ps(bytes / bandwidth);
    return free;
  }
  // Resource keys: a GPU's memory, a direct link one way, a switch port one way.
  static std::tuple<int, int, int> memory(int g) { return {0, g, 0}; }
  // The fabric resources data from GPU a to GPU b occupies, through `f(key, bandwidth)`.
  template <class F>
  void fabric(int a, int b, F&& f) const {
    const Route& r = route_of(a, b);
    if (r.via == Route::Via::Link) {
      f(std::tuple<int, int, int>{1, r.index, a < b ? 0 : 1}, r.spec.bandwidth);
    } else if (r.via == Route::Via::Switch) {
      f(std::tuple<int, int, int>{2, r.index, 2 * a}, r.spec.bandwidth);      // a's port, out
      f(std::tuple<int, int, int>{2, r.index, 2 * b + 1}, r.spec.bandwidth);  // b's port, in
    }
  }

  // ---- the threads' side (hooks: on the engine thread, inside a fiber)

  static Thread& of(const ccc_host_thread* self) { return *static_cast<Thread*>(self->block); }
  int rank_of(const Thread& t) const { return t.block->launch->rank; }

  void suspend(Thread& t) {
    Block& b = *t.block;
    b.fibers->suspend(static_cast<size_t>(&t - b.threads.data()));
  }
  void make_ready(Thread& t) {
    t.state = Thread::State::Ready;
    ready.push({t.clock, t.order, &t});
  }
  // Gives the turn to any thread behind this one in virtual time, so that what this one reads
  // next (a word, a memory or link's queue) is what the threads before it made of it.
  void catch_up(Thread& t) {
    if (!ready.empty() && ready.top().clock < t.clock) {
      make_ready(t);
      suspend(t);
    }
  }
  // The thread needs what its loads returned: it waits for them.
  static void use_loads(Thread& t) { t.clock = std::max(t.clock, t.loads_done); }

  // The value of word w at p that a load issued at `at` reads.
  static uint64_t value_at(const Word& w, const void* p, int bytes, Ps at) {
    for (auto v = w.values.rbegin(); v != w.values.rend(); ++v)
      if (v->visible <= at) return v->value;
    return read(p, bytes);
  }
  static uint64_t read(const void* p, int bytes) {
    if (bytes == 4) return std::atomic_ref<unsigned>(*static_cast<unsigned*>(const_cast<void*>(p))).load();
    return std::atomic_ref<unsigned long long>(*static_cast<unsigned long long*>(const_cast<void*>(p))).load();
  }
  static void write(void* p, uint64_t v, int bytes) {
    if (bytes == 4)
      std::atomic_ref<unsigned>(*static_cast<unsigned*>(p)).store(static_cast<unsigned>(v));
    else
      std::atomic_ref<unsigned long long>(*static_cast<unsigned long long*>(p)).store(v);
  }

  static unsigned long long hook_load(const ccc_host_thread* self, const void* p, int bytes) {
    Thread& t = of(self);
    Impl& e = *t.engine;
    e.catch_up(t);
    const Word& w = e.word(p);
    const uint64_t v = value_at(w, p, bytes, t.clock);
    t.polled.push_back({p, t.clock, v, bytes});
    t.loads_done = std::max(t.loads_done, t.clock + e.round_trip(e.gpu(e.rank_of(t)), e.gpu(e.owner(w, t))));
    t.clock += to_ps(e.constants.issue);
    return v;
  }

  static void hook_store(const ccc_host_thread* self, void* p, unsigned long long v, int bytes, int release) {
    Thread& t = of(self);
    Impl& e = *t.engine;
    use_loads(t);  // the value stored depends on them, as a rule
    Word& w = e.word(p);
    Ps visible = t.clock + e.one_way(e.gpu(e.rank_of(t)), e.gpu(e.owner(w, t)));
    if (release != 0) visible = std::max(visible, t.stores_done);
    if (w.values.empty()) w.values.push_back({INT64_MIN, read(p, bytes), nullptr});
    visible = std::max(visible, w.values.back().visible);  // one word's stores stay in order
    MarkPtr store = e.mark_of(t, t.clock, "store", p, t.mark);
    w.values.push_back({visible, v, store});
    t.stores_done = std::max(t.stores_done, visible);
    t.clock += to_ps(e.constants.issue);
    write(p, v, bytes);
    e.wake_watchers(p, visible, store);
  }

  // Threads parked on the word at p poll again once its new value is visible.
  void wake_watchers(const void* p, Ps visible, const MarkPtr& store) {
    auto it = watchers.find(p);
    if (it == watchers.end()) return;
    for (auto [w, parked] : it->second) {
      if (w->state != Thread::State::Parked || w->parked != parked) continue;
      ++w->parked;
      waited(*w, visible, p, store);
      make_ready(*w);
    }
    watchers.erase(it);
  }

  // Errors are not timed: the word holds the first, and every later load reads it.
  static void hook_record_error(const ccc_host_thread* self, unsigned* p, unsigned code) {
    Thread& t = of(self);
    Impl& e = *t.engine;
    e.catch_up(t);  // the first error in virtual time wins
    unsigned expected = CCC_OK;
    std::atomic_ref<unsigned>(*p).compare_exchange_strong(expected, code);
    e.word(p).values.clear();
    e.wake_watchers(p, t.clock, e.mark_of(t, t.clock, "error", p, t.mark));
  }

  static void hook_move(const ccc_host_thread* self, const int* src, int nsrc, int dst, long long bytes, int gather) {
    Thread& t = of(self);
    Impl& e = *t.engine;
    use_loads(t);
    e.catch_up(t);
    const double share = std::ceil(static_cast<double>(bytes) / t.self.count);  // this thread's part, per source
    if (share <= 0) return;
    const double written = gather != 0 ? share * nsrc : share;  // a gather writes every source's bytes
    const Ps start = t.clock + to_ps(e.constants.issue);
    const int to = e.gpu(dst), me = e.gpu(e.rank_of(t));
    const Gpu& mine = e.topology.gpus[static_cast<size_t>(me)];
    Ps end = start, first = to_ps(e.constants.local_load);  // the first bytes' round trip
    Block& b = *t.block;
    {
      const Ps s = std::max(start, b.free);
      b.free = s + to_ps(written / mine.channel_bandwidth);
      end = std::max(end, b.free);
    }
    for (int k = 0; k < nsrc; ++k) {
      const int from = e.gpu(src[k]);
      const Gpu& g = e.topology.gpus[static_cast<size_t>(from)];
      end = std::max(end, e.through(memory(from), start, share, g.memory_bandwidth));
      if (from != me) {
        e.fabric(from, me, [&](const auto& key, double bw) { end = std::max(end, e.through(key, start, share, bw)); });
        first = std::max(first, e.round_trip(me, from));
      }
    }
    end = std::max(end, e.through(memory(to), start, written, e.topology.gpus[static_cast<size_t>(to)].memory_bandwidth));
    if (to != me) {
      e.fabric(me, to, [&](const auto& key, double bw) { end = std::max(end, e.through(key, start, written, bw)); });
      t.stores_done = std::max(t.stores_done, end + e.one_way(me, to));
    }
    t.clock = end + first;
  }

  static unsigned long long hook_now(const ccc_host_thread* self) {
    Thread& t = of(self);
    use_loads(t);
    return static_cast<unsigned long long>(t.clock / 1000);
  }

  static void* hook_shared(const ccc_host_thread* self, const void* key, unsigned long long bytes) {
    std::vector<std::byte>& a = of(self).block->shared[key];
    if (a.size() != bytes) a.assign(bytes, std::byte{0xA5});  // shared memory starts undefined
    return a.data();
  }

  static int hook_barrier(const ccc_host_thread* self, int p) {
    Thread& t = of(self);
    Impl& e = *t.engine;
    Block& b = *t.block;
    use_loads(t);
    t.polled.clear();
    if (b.latest == nullptr || t.clock > b.arrived) b.latest = e.mark_of(t, t.clock, "arrive", nullptr, t.mark);
    b.arrived = std::max(b.arrived, t.clock);
    t.state = Thread::State::AtBarrier;
    if (b.barrier.arrive(p != 0)) e.release(b);
    e.suspend(t);
    return b.barrier.result() ? 1 : 0;
  }
  void release(Block& b) {
    const Ps at = b.arrived + to_ps(constants.barrier);
    for (Thread& w : b.threads)
      if (w.state == Thread::State::AtBarrier) {
        // The thread that arrived last set everyone's time; its own timeline goes on as it was.
        if (b.latest != nullptr && (b.latest->thread != static_cast<int>(w.self.index)))
          w.mark = mark_of(w, at, "barrier", nullptr, b.latest);
        w.clock = at;
        make_ready(w);
      }
    b.arrived = 0;
    b.latest = nullptr;
  }

  MarkPtr mark_of(const Thread& t, Ps at, const char* what, const void* word, MarkPtr cause) const {
    auto m = std::make_shared<Mark>();
    m->at = at;
    m->what = what;
    m->rank = rank_of(t);
    m->block = t.block->index;
    m->thread = static_cast<int>(t.self.index);
    m->word = word;
    m->cause = std::move(cause);
    return m;
  }
  // Thread t's wait on `word` ends at `visible` (if that is later than its clock), because of `store`.
  void waited(Thread& t, Ps visible, const void* word, const MarkPtr& store) {
    if (visible <= t.clock) return;
    t.clock = visible;
    t.mark = mark_of(t, visible, "wait", word, store);
  }

  // A poll found nothing: the thread sleeps until one of the words it polled changes: a store
  // made already but visible only after the load looked, or one yet to come.
  static void hook_relax(const ccc_host_thread* self) {
    Thread& t = of(self);
    Impl& e = *t.engine;
    use_loads(t);
    const Word::Value* next = nullptr;
    const void* next_word = nullptr;
    bool changed = false;  // a word's value changed without a store (an error recorded, an abort)
    for (const Thread::Polled& polled : t.polled) {
      const Word& w = e.word(polled.word);
      changed = changed || value_at(w, polled.word, polled.bytes, t.clock) != polled.seen;
      for (const Word::Value& v : w.values)
        if (v.visible > polled.at) {
          if (next == nullptr || v.visible < next->visible) {
            next = &v;
            next_word = polled.word;
          }
          break;
        }
    }
    if (changed) {
      e.make_ready(t);
    } else if (next != nullptr) {
      e.waited(t, next->visible, next_word, next->store);
      e.make_ready(t);
    } else {
      t.state = Thread::State::Parked;
      for (const Thread::Polled& polled : t.polled) e.watchers[polled.word].push_back({&t, t.parked});
    }
    t.polled.clear();
    e.suspend(t);
  }

  // ---- the report

  // What the word at p is, in the words of the launch ABI (ccc_abi.h).
  std::string describe(const void* p) const {
    const auto at = reinterpret_cast<uintptr_t>(p);
    auto it = placed.upper_bound(at);
    if (it == placed.begin() || at >= std::prev(it)->second.end) return fmt::format("word {}", p);
    const Placed& where = std::prev(it)->second;
    const uint64_t offset = at - std::prev(it)->first;
    switch (where.kind) {
      case SimMemory::Inbox: {
        const uint64_t slot = offset / sizeof(unsigned long long);
        return fmt::format("rank {}'s inbox, from rank {} channel {}", where.rank, slot % static_cast<uint64_t>(nranks),
                           slot / static_cast<uint64_t>(nranks));
      }
      case SimMemory::Sync:
        if (offset < sizeof(HostRankSync::progress)) return fmt::format("rank {}'s progress", where.rank);
        if (offset < offsetof(HostRankSync, error)) return fmt::format("rank {}'s mailbox", where.rank);
        return fmt::format("rank {}'s error word", where.rank);
      case SimMemory::LlLines: return fmt::format("rank {}'s ll lines", where.rank);
      case SimMemory::Other: break;
    }
    return fmt::format("rank {}'s memory", where.rank);
  }

  // The chain of marks that set the end of the launch that ended last, from its launch on.
  std::string critical_path() const {
    std::vector<const Mark*> chain;
    for (const Mark* m = latest_end.get(); m != nullptr; m = m->cause.get()) {
      chain.push_back(m);
      if (std::string_view(m->what) == "launch") break;
    }
    std::string out;
    const Ps origin = chain.empty() ? 0 : chain.back()->at;
    for (auto m = chain.rbegin(); m != chain.rend(); ++m) {
      const Mark& k = **m;
      out += fmt::format("{:>10.3f} us  rank {} channel {} thread {}  {}", static_cast<double>(k.at - origin) * 1e-6,
                         k.rank, k.block, k.thread, k.what);
      if (k.word != nullptr) out += " " + describe(k.word);
      out += "\n";
    }
    return out;
  }

  // ---- the engine thread

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      admit(lock);
      if (ready.empty()) {
        if (live_threads > 0) {  // every thread waits
          if (wait_for_late_launch(lock)) continue;
          time_out_parked();
          continue;
        }
        if (stop) return;
        wake.wait(lock);
        continue;
      }
      const Ready next = ready.top();
      if (wait_for_launches(lock, next.clock)) continue;
      ready.pop();
      frontier = std::max(frontier, next.clock);
      lock.unlock();
      Thread& t = *next.thread;
      t.state = Thread::State::Running;
      Block& b = *t.block;
      const size_t i = static_cast<size_t>(&t - b.threads.data());
      const bool more = b.fibers->resume(i);
      lock.lock();
      if (!more) finished(t);
    }
  }

  // Starts the front launch of every rank that runs none (host tasks run at once).
  void admit(std::unique_lock<std::mutex>& lock) {
    for (int r = 0; r < nranks; ++r) {
      Rank& rank = ranks[static_cast<size_t>(r)];
      while (rank.running == nullptr && !rank.queue.empty()) {
        Work& w = rank.queue.front();
        const bool late = rank.absent;
        rank.absent = false;
        if (w.task) {
          std::function<void()> task = std::move(w.task);
          lock.unlock();
          task();
          lock.lock();
          complete(rank, rank.stream);
          continue;
        }
        const Gpu& g = topology.gpus[static_cast<size_t>(gpu(r))];
        Ps start = rank.stream + to_ps(g.launch);
        // A launch that came after virtual time went on without it starts where time is now.
        if (late) start = std::max({start, frontier, latest.load()});
        start_launch(r, w, start);
      }
    }
  }

  void start_launch(int r, Work& w, Ps start) {
    auto launch = std::make_unique<Launch>();
    launch->rank = r;
    launch->kernel = w.kernel;
    launch->args = w.args;
    launch->channels = w.channels;
    launch->end = start;
    Rank& rank = ranks[static_cast<size_t>(r)];
    const uint64_t seq = ++launches, nth = ++rank.launches;
    auto first = std::make_shared<Mark>();
    first->at = start;
    first->what = "launch";
    first->rank = r;
    // The previous launch's end, without its own path: each launch's path stops at its start.
    if (const MarkPtr& before = rank.end_mark) {
      auto end = std::make_shared<Mark>(*before);
      end->cause = nullptr;
      first->cause = std::move(end);
    }
    const MarkPtr start_mark = first;
    // Every block's fibers first: where no stack at all can be had for one, the launch fails before
    // any thread runs (its rank is aborted: its peers fail instead of waiting). A block that gets
    // fewer stacks than threads runs with as many threads: kernels are correct for any block size.
    for (int c = 0; c < w.channels; ++c) {
      auto fibers = std::make_unique<Fibers>(block_threads);
      if (fibers->size() == 0) {
        unsigned expected = CCC_OK;
        std::atomic_ref<unsigned>(*w.args.ranks[r].error).compare_exchange_strong(expected, CCC_ERR_ABORTED);
        complete(rank, start);
        return;
      }
      const auto threads = static_cast<unsigned>(fibers->size());
      auto block = std::make_unique<Block>(threads);
      block->launch = launch.get();
      block->index = c;
      block->fibers = std::move(fibers);
      block->threads.resize(threads);
      launch->blocks.push_back(std::move(block));
    }
    for (auto& block : launch->blocks) {
      const int c = block->index;
      const auto threads = static_cast<unsigned>(block->threads.size());
      for (unsigned i = 0; i < threads; ++i) {
        Thread& t = block->threads[i];
        t.engine = this;
        t.block = block.get();
        t.self = {i, threads, seq, &t, &Impl::hook_barrier, &Impl::hook_relax, &hooks};
        // Ties go by the rank's launch, the rank, the block, then the thread (0 last, as host
        // blocks order their turns): nothing the host's timing decides.
        t.order = (nth << 28) | (static_cast<uint64_t>(r) << 16) | (static_cast<uint64_t>(c) << 10) | (threads - 1 - i);
        t.clock = start;
        t.mark = start_mark;
        Block* bp = block.get();
        block->fibers->start(i, [bp, i] {
          const Launch& l = *bp->launch;
          l.kernel.entry(l.args, bp->index, &bp->threads[i].self);
        });
        make_ready(t);
        ++live_threads;
      }
    }
    launch->blocks_left = w.channels;
    rank.running = std::move(launch);
  }

  void finished(Thread& t) {
    t.state = Thread::State::Finished;
    --live_threads;
    Block& b = *t.block;
    Launch& l = *b.launch;
    const Ps end_here = std::max({t.clock, t.loads_done, t.stores_done});
    if (l.end_mark == nullptr || end_here > l.end) l.end_mark = mark_of(t, end_here, "end", nullptr, t.mark);
    l.end = std::max(l.end, end_here);
    if (b.barrier.leave()) release(b);
    if (++b.finished < b.threads.size()) return;
    if (b.barrier.diverged()) record_diverged(l.args, b.index, l.channels);
    if (--l.blocks_left > 0) return;
    Rank& rank = ranks[static_cast<size_t>(l.rank)];
    const Ps end = l.end;
    rank.end_mark = l.end_mark;
    if (latest_end == nullptr || end >= latest_end->at) latest_end = l.end_mark;
    // Its threads may still be listed at words they polled before their last wake.
    for (auto it = watchers.begin(); it != watchers.end();) {
      std::erase_if(it->second, [&](const auto& w) { return w.first->block->launch == &l; });
      it = it->second.empty() ? watchers.erase(it) : std::next(it);
    }
    rank.running.reset();  // its fibers have all returned
    complete(rank, end);
  }

  // The front of the rank's queue is done at `end`.
  void complete(Rank& rank, Ps end) {
    rank.queue.pop_front();
    rank.stream = end;
    ++rank.done;
    latest = std::max(latest.load(), end);
    if (live_threads == 0 && std::all_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.queue.empty(); })) {
      words.clear();  // every value is visible now, in memory
      watchers.clear();
      busy.clear();
      frontier = 0;
    }
    idle.notify_all();
  }

  // Virtual time may not pass `until` while a rank with nothing queued could still launch before
  // it: waits (host time, kLaunchGrace at most) for its launch. True when something was queued.
  bool wait_for_launches(std::unique_lock<std::mutex>& lock, Ps until) {
    auto blocking = [&] {
      for (int i = 0; i < nranks; ++i) {
        const Rank& r = ranks[static_cast<size_t>(i)];
        if (r.running == nullptr && r.queue.empty() && !r.absent &&
            r.stream + to_ps(topology.gpus[static_cast<size_t>(gpu(i))].launch) <= until)
          return true;
      }
      return false;
    };
    if (!blocking()) return false;
    const uint64_t before = queued_total();
    wake.wait_for(lock, kLaunchGrace, [&] { return queued_total() != before || stop; });
    if (queued_total() != before) return true;
    for (Rank& r : ranks)
      if (r.running == nullptr && r.queue.empty()) r.absent = true;
    return false;
  }
  // Every thread waits, and a rank with nothing queued may still launch what they wait for: waits
  // (host time) for it as long as the next step of time_out_parked. True when something was queued.
  bool wait_for_late_launch(std::unique_lock<std::mutex>& lock) {
    if (std::none_of(ranks.begin(), ranks.end(), [](const Rank& r) { return r.running == nullptr && r.queue.empty(); }))
      return false;
    // As long as time_out_parked then advances the waits: host and virtual time keep pace.
    const std::chrono::nanoseconds timeout(std::min<uint64_t>(shortest_timeout_ns(), 1'000'000'000) / 64 + 1);
    const uint64_t before = queued_total();
    wake.wait_for(lock, timeout, [&] { return queued_total() != before || stop; });
    return queued_total() != before;
  }
  uint64_t shortest_timeout_ns() const {
    uint64_t ns = ~uint64_t{0};
    for (const Rank& r : ranks)
      if (r.running != nullptr) ns = std::min<uint64_t>(ns, r.running->args.timeout_ns);
    return ns;
  }
  uint64_t queued_total() const {
    uint64_t n = 0;
    for (const Rank& r : ranks) n += r.queued;
    return n;
  }

  // Every thread waits and nothing more came: their waits run on. Each poll that finds nothing
  // then costs 1/64 of the launch's timeout (of a second, where the timeout is longer or
  // infinite), so a wait fails after one to two timeouts of virtual time (the prelude checks the
  // clock, its peers' error words and its own every 64 polls: an abort is seen too).
  void time_out_parked() {
    for (Rank& r : ranks) {
      if (r.running == nullptr) continue;
      const Ps step = static_cast<Ps>(std::min<uint64_t>(r.running->args.timeout_ns, 1'000'000'000) / 64 * 1000 + 1000);
      for (auto& b : r.running->blocks)
        for (Thread& t : b->threads)
          if (t.state == Thread::State::Parked) {
            ++t.parked;
            t.clock += step;
            t.mark = mark_of(t, t.clock, "timeout", nullptr, t.mark);
            make_ready(t);
          }
    }
  }
};

namespace {

// Rank `rank`'s stream in the engine.
class SimStream : public HostQueue {
 public:
  SimStream(SimEngine::Impl& engine, int rank) : engine_(engine), rank_(rank) {}
  void enqueue(const HostKernel& kernel, const ccc_launch_args& args, int channels, unsigned /*threads*/) override {
    push({kernel, args, channels, {}});
  }
  void enqueue(std::function<void()> task) override { push({{}, {}, 0, std::move(task)}); }
  void wait_idle() override {
    std::unique_lock lock(engine_.mutex);
    SimEngine::Impl::Rank& r = engine_.ranks[static_cast<size_t>(rank_)];
    const uint64_t target = r.queued;
    engine_.idle.wait(lock, [&] { return r.done >= target; });
  }
  bool idle() override {
    std::lock_guard lock(engine_.mutex);
    return engine_.ranks[static_cast<size_t>(rank_)].queue.empty();
  }

 private:
  void push(SimEngine::Impl::Work work) {
    {
      std::lock_guard lock(engine_.mutex);
      SimEngine::Impl::Rank& r = engine_.ranks[static_cast<size_t>(rank_)];
      r.queue.push_back(std::move(work));
      ++r.queued;
    }
    engine_.wake.notify_all();
  }
  SimEngine::Impl& engine_;
  int rank_;
};

}  // namespace

SimEngine::SimEngine(Topology topology, int nranks, unsigned block_threads, bool move_data, SimConstants constants) {
  if (nranks > topology.ngpus())
    throw Error(ErrorKind::InvalidArgument, fmt::format("the simulator runs rank r on GPU r: {} ranks need {} GPUs, and "
                                                        "topology {} has {}", nranks, nranks, topology.name, topology.ngpus()));
  if (std::string problem = validate_topology(topology); !problem.empty())
    throw Error(ErrorKind::InvalidArgument, fmt::format("topology {}: {}", topology.name, problem));
  impl_ = std::make_unique<Impl>(std::move(topology), nranks, block_threads, move_data, constants);
}

SimEngine::~SimEngine() = default;

std::unique_ptr<HostQueue> SimEngine::stream(int rank) { return std::make_unique<SimStream>(*impl_, rank); }

void SimEngine::place(int rank, const void* p, uint64_t bytes, SimMemory kind) {
  std::lock_guard lock(impl_->mutex);
  const auto at = reinterpret_cast<uintptr_t>(p);
  impl_->placed[at] = {at + bytes, rank, kind};
}

std::string SimEngine::critical_path() {
  std::lock_guard lock(impl_->mutex);
  return impl_->critical_path();
}

double SimEngine::now() { return static_cast<double>(impl_->latest.load()) * 1e-12; }

const Topology& SimEngine::topology() const { return impl_->topology; }

unsigned SimEngine::block_threads() const { return impl_->block_threads; }

}  // namespace ccc
