// A recording stand-in for NVIDIA's libnccl.so.2 (NCCL 2.28), for tests on machines without a GPU.
// It is built as libnccl.so.2 and put first on the library path, so code that dlopens or links NCCL
// gets this instead. Every function of nccl.h is exported under both names (ncclX and the profiling
// twin pncclX, an alias), as are the host functions of the device API (nccl_device.h), which only
// record the call and fail: there is no device here.
//
// It runs on the host. The tests' fake CUDA driver hands out host memory as "device memory", so
// every buffer is read and written with memcpy; streams are ignored and every operation has
// completed when its call (or the outermost ncclGroupEnd) returns. Ranks are processes (or
// threads, or the ranks of ncclCommInitAll driven from one thread in a group) sharing a POSIX
// shared-memory segment per communicator, named after the unique id's random bytes: a header
// (barrier, abort flag, ...) and one data slot per rank. A collective copies what this rank
// contributes into its own slot, meets the other ranks at a barrier, computes its output from all
// slots and meets them again (so no slot is overwritten while a peer still reads it). Reductions
// follow NCCL's types and ops: integers wrap, Avg of integers truncates, 16- and 8-bit floats are
// accumulated in float in rank order and rounded once, Avg of floats is a PreMulSum by 1/nranks
// (as NCCL does it), and a PreMulSum op multiplies each rank's input by that rank's own scalar.
// Send/recv go through per-(sender, receiver) mailboxes with their own sequence/ack counters, so
// only the two ranks of a pair meet: sends are buffered (a send returns once its data is in the
// mailbox, unless the previous message to that peer is still unread), recvs wait for their data.
//
// Recording: if FAKE_NCCL_LOG names a file, every exported call appends one line to it when it is
// called (inside a group too), written with one write() so that the lines of several processes
// never interleave: "pid=<pid> rank=<rank or -1> <ncclX> <key=value ...>".
//
// Knobs (environment): FAKE_NCCL_LOG (see above); FAKE_NCCL_SLOT_BYTES (bytes of each rank's data
// slot, default 64 MiB, read by the rank that creates a communicator: the largest contribution of
// one collective, and nranks times the largest send batch to one peer; tmpfs pages only count once
// touched); FAKE_NCCL_TIMEOUT (seconds a rank waits for its peers before the call fails with
// ncclRemoteError, default 60); FAKE_NCCL_CUDEVICE (what ncclCommCuDevice answers for a
// communicator made by ncclCommInitRank*, default 0).
//
// Limitations: no device API, ncclCommShrink or ncclCommRevoke (ncclInvalidUsage); ranks must
// issue their collectives on a communicator in the same order (NCCL's rule too) and, in a group,
// the j-th collective of every communicator the thread drives runs in the same round; send/recv of
// a group run after its collectives; a rank whose barrier times out poisons the communicator (sets
// the abort flag) because the barrier's count is no longer trustworthy; nonblocking
// communicators behave as blocking ones; ncclGroupSimulateEnd executes the group and estimates 0.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <fcntl.h>
#include <nccl.h>
#include <nccl_device.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

constexpr char kIdMagic[8] = {'F', 'A', 'K', 'E', 'N', 'C', 'C', 'L'};
constexpr uint64_t kReady = 0x6661'6b65'6e63'636cULL;      // the creator finished the header
constexpr uint64_t kCommAlive = 0x636f'6d6d'616c'6976ULL;  // cleared when a comm is freed
constexpr int kPreMulSum = ncclNumOps;                     // Op::redop of a user (PreMulSum) op
constexpr size_t kTypeSize[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

// ---- errors and recording ------------------------------------------------------------------

thread_local std::string last_error;  // what ncclGetLastError answers

__attribute__((format(printf, 2, 3))) ncclResult_t fail(ncclResult_t result, const char* format, ...) {
  char text[512];
  va_list args;
  va_start(args, format);
  vsnprintf(text, sizeof text, format, args);
  va_end(args);
  last_error = text;
  return result;
}

unsigned long hex(const void* p) { return static_cast<unsigned long>(reinterpret_cast<uintptr_t>(p)); }

__attribute__((format(printf, 3, 4))) void record(int rank, const char* function, const char* format, ...) {
  const char* path = getenv("FAKE_NCCL_LOG");
  if (path == nullptr || *path == '\0') return;
  char line[1024];
  int n = snprintf(line, sizeof line, "pid=%d rank=%d %s ", static_cast<int>(getpid()), rank, function);
  va_list args;
  va_start(args, format);
  n += vsnprintf(line + n, sizeof line - n, format, args);
  va_end(args);
  n = std::min<int>(n, sizeof line - 2);
  while (n > 0 && line[n - 1] == ' ') --n;  // a call without fields
  line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (write(fd, line, n) < 0) {
  }  // a lost log line must not fail the call
  close(fd);
}

double env_number(const char* name, double fallback) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  double value = strtod(text, &end);
  return *end == '\0' && value > 0 ? value : fallback;
}

size_t slot_bytes_from_env() {
  auto bytes = static_cast<size_t>(env_number("FAKE_NCCL_SLOT_BYTES", 64.0 * 1024 * 1024));
  return (std::max<size_t>(bytes, 4096) + 4095) / 4096 * 4096;
}

// ---- shared state ------------------------------------------------------------------------------

// The atomics live in a zero-filled shared mapping and are used without being constructed: a
// lock-free std::atomic of an integer is that integer in memory, zero bits mean zero, and its
// operations work across processes.
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

struct Header {
  std::atomic<uint64_t> ready;      // kReady once nranks and slot_bytes are set
  std::atomic<uint64_t> bar_count;  // arrivals in the barrier's current generation
  std::atomic<uint64_t> bar_gen;    // barrier generation
  std::atomic<int> aborted;         // a rank called ncclCommAbort (or gave up on a barrier)
  int nranks;
  uint64_t slot_bytes;
};

struct Pair {                 // the mailbox of one (sender, receiver)
  std::atomic<uint64_t> seq;  // messages the sender posted
  std::atomic<uint64_t> ack;  // messages the receiver consumed
  std::atomic<uint64_t> bytes;
};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Control area (header, per-rank join counts, per-rank PreMulSum scalars, pairs), then nranks
// collective slots, then nranks mailbox slots (each split in nranks parts, one per receiver).
struct Layout {
  size_t n = 0, slot = 0, joined = 0, scalars = 0, pairs = 0, data = 0, total = 0;
  Layout() = default;
  Layout(int nranks, size_t slot_bytes) : n(nranks), slot(slot_bytes) {
    joined = round_up(sizeof(Header), 64);
    scalars = round_up(joined + n * sizeof(std::atomic<int>), 64);
    pairs = round_up(scalars + n * 8, 64);
    data = round_up(pairs + n * n * sizeof(Pair), 4096);
    total = data + 2 * n * slot;
  }
};

struct UserOp {  // a PreMulSum op of ncclRedOpCreatePreMulSum
  ncclDataType_t datatype;
  ncclScalarResidence_t residence;
  unsigned char value[8];  // ncclScalarHostImmediate: the scalar, read at creation
  const void* pointer;     // ncclScalarDevice: read at each call
};

}  // namespace

struct ncclComm {
  uint64_t alive = kCommAlive;
  char* base = nullptr;  // the shared mapping
  size_t mapped = 0;
  Layout layout;
  std::string name;  // of the shared-memory object; children's names derive from it
  int rank = 0, nranks = 0, cudev = 0;
  uint64_t splits = 0;      // ncclCommSplit calls so far: part of a child's name
  uint64_t init_token = 0;  // barrier generation of the pending init barrier
  bool failed = false;      // a wait failed: ncclCommGetAsyncError reports it
  std::map<int, UserOp> user_ops;
  int next_op = ncclNumOps;

  Header* header() const { return reinterpret_cast<Header*>(base); }
  std::atomic<int>& joined(int r) const { return reinterpret_cast<std::atomic<int>*>(base + layout.joined)[r]; }
  unsigned char* scalar(int r) const { return reinterpret_cast<unsigned char*>(base + layout.scalars) + 8 * r; }
  Pair& pair(int src, int dst) const { return reinterpret_cast<Pair*>(base + layout.pairs)[src * nranks + dst]; }
  char* slot(int r) const { return base + layout.data + r * layout.slot; }
  size_t mailbox_bytes() const { return layout.slot / nranks; }
  char* mailbox(int src, int dst) const { return slot(nranks + src) + dst * mailbox_bytes(); }
};

namespace {

int rank_of(const ncclComm* comm) { return comm != nullptr && comm->alive == kCommAlive ? comm->rank : -1; }

ncclResult_t check_comm(const ncclComm* comm, const char* function) {
  if (comm == nullptr) return fail(ncclInvalidArgument, "%s : comm argument is NULL", function);
  if (comm->alive != kCommAlive) return fail(ncclInvalidArgument, "%s : comm is not a live communicator", function);
  return ncclSuccess;
}

void free_comm(ncclComm* comm) {
  if (comm->base != nullptr) munmap(comm->base, comm->mapped);
  comm->alive = 0;
  delete comm;
}

// Waits until done() holds; fails on the abort flag (when there is a header) or after
// FAKE_NCCL_TIMEOUT seconds. A timed-out rank sets the abort flag, so its peers fail fast.
template <class Done>
ncclResult_t spin(Header* header, Done done, const char* waiting_for) {
  const double limit = env_number("FAKE_NCCL_TIMEOUT", 60);
  const auto start = std::chrono::steady_clock::now();
  for (unsigned i = 0;; ++i) {
    if (done()) return ncclSuccess;
    if (header != nullptr && header->aborted.load() != 0)
      return fail(ncclRemoteError, "a peer aborted the communicator while this rank waited for %s", waiting_for);
    if (i < 1000) {
      sched_yield();
      continue;
    }
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > limit) {
      if (header != nullptr) header->aborted.store(1);
      return fail(ncclRemoteError, "timed out after %g s waiting for %s (FAKE_NCCL_TIMEOUT)", limit, waiting_for);
    }
    usleep(100);
  }
}

template <class Done>
ncclResult_t comm_wait(ncclComm* comm, Done done, const char* waiting_for) {
  ncclResult_t result = spin(comm->header(), done, waiting_for);
  if (result != ncclSuccess) comm->failed = true;
  return result;
}

// A generation-counting barrier, split in two so that one thread can arrive for every rank it
// drives before it waits for any of them (ncclCommInitAll's ranks in a group, or communicators
// whose peers queued them in another order).
uint64_t arrive(ncclComm* comm) {
  Header* h = comm->header();
  uint64_t generation = h->bar_gen.load();  // before the count: the generation cannot move on without us
  if (h->bar_count.fetch_add(1) + 1 == static_cast<uint64_t>(comm->nranks)) {
    h->bar_count.store(0);
    h->bar_gen.fetch_add(1);
  }
  return generation;
}

ncclResult_t await(ncclComm* comm, uint64_t generation) {
  return comm_wait(
      comm, [&] { return comm->header()->bar_gen.load() != generation; }, "ranks");
}

std::string shm_name(const unsigned char* random, size_t n) {
  std::string name = "/fake-nccl-";
  for (size_t i = 0; i < n; ++i) {
    static constexpr char digits[] = "0123456789abcdef";
    name += digits[random[i] >> 4];
    name += digits[random[i] & 15];
  }
  return name;
}

// Opens (the first rank to come creates) the shared state of a communicator, claims `rank` in it
// and arrives at the init barrier; finish_init waits there.
ncclResult_t join(const std::string& name, int nranks, int rank, int cudev, ncclComm** out) {
  int fd = -1;
  bool creator = false;
  for (;;) {  // create, or open what another rank created; retry if it vanished in between
    fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd >= 0) {
      creator = true;
      break;
    }
    if (errno != EEXIST) return fail(ncclSystemError, "shm_open(%s): %s", name.c_str(), strerror(errno));
    fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd >= 0) break;
    if (errno != ENOENT) return fail(ncclSystemError, "shm_open(%s): %s", name.c_str(), strerror(errno));
  }
  size_t size = 0;
  if (creator) {
    size = Layout(nranks, slot_bytes_from_env()).total;
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
      ncclResult_t result = fail(ncclSystemError, "ftruncate(%s, %zu): %s", name.c_str(), size, strerror(errno));
      close(fd);
      shm_unlink(name.c_str());
      return result;
    }
  } else {  // the creator sizes it with one ftruncate: a nonzero size is the full size
    struct stat st {};
    ncclResult_t result = spin(
        nullptr, [&] { return fstat(fd, &st) == 0 && st.st_size > 0; }, "the first rank to create the communicator");
    if (result != ncclSuccess) {
      close(fd);
      return result;
    }
    size = static_cast<size_t>(st.st_size);
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED)
    return fail(ncclSystemError, "mmap of %zu bytes of %s: %s", size, name.c_str(), strerror(errno));

  auto* comm = new ncclComm;
  comm->base = static_cast<char*>(base);
  comm->mapped = size;
  comm->name = name;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->cudev = cudev;
  Header* h = comm->header();
  if (creator) {
    h->nranks = nranks;
    h->slot_bytes = slot_bytes_from_env();
    h->ready.store(kReady);
  } else {
    ncclResult_t result = spin(
        nullptr, [&] { return h->ready.load() == kReady; }, "the first rank to create the communicator");
    if (result == ncclSuccess && h->nranks != nranks)
      result = fail(ncclInvalidArgument, "nranks %d differs from the %d of the rank that created the communicator",
                    nranks, h->nranks);
    if (result != ncclSuccess) {
      free_comm(comm);
      return result;
    }
  }
  comm->layout = Layout(nranks, h->slot_bytes);
  if (comm->joined(rank).fetch_add(1) != 0) {
    free_comm(comm);
    return fail(ncclInvalidArgument, "rank %d joined the communicator twice", rank);
  }
  comm->init_token = arrive(comm);
  *out = comm;
  return ncclSuccess;
}

// Waits for every rank to join; then nobody opens the name again, so rank 0 removes it (and a
// failed rank too, so nothing is left behind).
ncclResult_t finish_init(ncclComm* comm) {
  ncclResult_t result = await(comm, comm->init_token);
  if (result != ncclSuccess || comm->rank == 0) shm_unlink(comm->name.c_str());
  return result;
}

// ---- reductions ------------------------------------------------------------------------------

// Element traits: E is the stored type, A the type it is reduced in.
template <class T>
struct Native {
  using E = T;
  using A = T;
  static A load(E e) { return e; }
  static E store(A a) { return a; }
};
struct Half {
  using E = __half;
  using A = float;
  static A load(E e) { return __half2float(e); }
  static E store(A a) { return __float2half_rn(a); }
};
struct Bf16 {
  using E = __nv_bfloat16;
  using A = float;
  static A load(E e) { return __bfloat162float(e); }
  static E store(A a) { return __float2bfloat16_rn(a); }
};
template <__nv_fp8_interpretation_t kind>
struct Fp8 {
  using E = __nv_fp8_storage_t;
  using A = float;
  static A load(E e) { return __half2float(__half(__nv_cvt_fp8_to_halfraw(e, kind))); }
  static E store(A a) { return __nv_cvt_float_to_fp8(a, __NV_SATFINITE, kind); }
};

template <class A>
A add(A a, A b) {
  if constexpr (std::is_integral_v<A>)  // two's-complement wrap, without signed overflow
    return static_cast<A>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  else
    return a + b;
}
template <class A>
A mul(A a, A b) {
  if constexpr (std::is_integral_v<A>)
    return static_cast<A>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  else
    return a * b;
}

struct ReduceArgs {
  const char* const* in;         // nranks inputs, in rank order
  const unsigned char* scalars;  // nranks PreMulSum scalars, 8 bytes apart
  char* out;
  size_t count;
  int nranks;
  int op;  // ncclSum .. ncclAvg, or kPreMulSum
};

template <class Tr>
void reduce_as(const ReduceArgs& a) {
  using E = typename Tr::E;
  using A = typename Tr::A;
  auto get = [](const void* p, size_t i) {
    E e;
    memcpy(&e, static_cast<const char*>(p) + i * sizeof(E), sizeof(E));
    return Tr::load(e);
  };
  constexpr bool integral = std::is_integral_v<A>;
  // NCCL makes Avg of floats a PreMulSum by 1/nranks, and of integers a sum divided at the end.
  const bool scaled = a.op == kPreMulSum || (a.op == ncclAvg && !integral);
  std::vector<A> scale(a.nranks);
  for (int r = 0; r < a.nranks && scaled; ++r)
    scale[r] = a.op == kPreMulSum ? get(a.scalars + 8 * r, 0) : static_cast<A>(A(1) / static_cast<A>(a.nranks));
  for (size_t i = 0; i < a.count; ++i) {
    A acc{};
    for (int r = 0; r < a.nranks; ++r) {
      A x = get(a.in[r], i);
      if (scaled) x = mul(x, scale[r]);
      if (r == 0)
        acc = x;
      else if (a.op == ncclProd)
        acc = mul(acc, x);
      else if (a.op == ncclMax)
        acc = integral ? std::max(acc, x) : static_cast<A>(std::fmax(acc, x));
      else if (a.op == ncclMin)
        acc = integral ? std::min(acc, x) : static_cast<A>(std::fmin(acc, x));
      else
        acc = add(acc, x);
    }
    if constexpr (integral) {
      if (a.op == ncclAvg) {  // C++'s truncating division, signed or unsigned as the type is
        if constexpr (std::is_signed_v<A>)
          acc = static_cast<A>(static_cast<int64_t>(acc) / a.nranks);
        else
          acc = static_cast<A>(static_cast<uint64_t>(acc) / static_cast<uint64_t>(a.nranks));
      }
    }
    E e = Tr::store(acc);
    memcpy(a.out + i * sizeof(E), &e, sizeof(E));
  }
}

using ReduceFn = void (*)(const ReduceArgs&);
// clang-format off
constexpr ReduceFn kReduce[ncclNumTypes] = {
    reduce_as<Native<int8_t>>,  reduce_as<Native<uint8_t>>, reduce_as<Native<int32_t>>, reduce_as<Native<uint32_t>>,
    reduce_as<Native<int64_t>>, reduce_as<Native<uint64_t>>, reduce_as<Half>,            reduce_as<Native<float>>,
    reduce_as<Native<double>>,  reduce_as<Bf16>,             reduce_as<Fp8<__NV_E4M3>>,  reduce_as<Fp8<__NV_E5M2>>};
// clang-format on

// ---- operations and groups -------------------------------------------------------------------

enum class Kind {
  AllReduce,
  Reduce,
  Broadcast,
  AllGather,
  ReduceScatter,
  AlltoAll,
  Gather,
  Scatter,
  Send,
  Recv,
  Split,
  Finalize
};

struct Op {
  Kind kind;
  ncclComm* comm;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  ncclDataType_t datatype = ncclInt8;
  int redop = ncclSum;  // or kPreMulSum, with `user`
  UserOp user{};
  int root = 0;  // the root, or the peer of a send/recv
  int color = 0, key = 0;
  ncclComm_t* newcomm = nullptr;
  ncclResult_t result = ncclSuccess;
};

struct Group {
  int depth = 0;
  std::vector<Op> ops;
  std::vector<ncclComm*> inits;      // ncclCommInitRank*/InitAll in the group: barrier at the end
  ncclResult_t error = ncclSuccess;  // a call of the group failed: the group is dropped
};
thread_local Group group;

// A call that fails inside a group fails the whole group too (NCCL drops it at ncclGroupEnd).
ncclResult_t note(ncclResult_t result) {
  if (result != ncclSuccess && group.depth > 0 && group.error == ncclSuccess) group.error = result;
  return result;
}

void copy(void* to, const void* from, size_t bytes) {
  if (bytes != 0 && to != from) memcpy(to, from, bytes);
}

size_t bytes_of(const Op& o) { return o.count * kTypeSize[o.datatype]; }

void contribute(Op& o) {
  ncclComm* c = o.comm;
  const int n = c->nranks, me = c->rank;
  const size_t b = bytes_of(o);
  switch (o.kind) {
    case Kind::AllReduce:
    case Kind::Reduce:
    case Kind::AllGather:
    case Kind::Gather: copy(c->slot(me), o.send, b); break;
    case Kind::ReduceScatter:
    case Kind::AlltoAll: copy(c->slot(me), o.send, n * b); break;
    case Kind::Broadcast:
      if (me == o.root) copy(c->slot(me), o.send, b);
      break;
    case Kind::Scatter:
      if (me == o.root) copy(c->slot(me), o.send, n * b);
      break;
    case Kind::Split: {
      const int mine[2] = {o.color, o.key};
      memcpy(c->slot(me), mine, sizeof mine);
      break;
    }
    default: break;
  }
  if (o.redop == kPreMulSum)
    memcpy(c->scalar(me), o.user.residence == ncclScalarDevice ? o.user.pointer : o.user.value, kTypeSize[o.datatype]);
}

void reduce_into(const Op& o, size_t offset, void* out) {
  ncclComm* c = o.comm;
  std::vector<const char*> in(c->nranks);
  for (int r = 0; r < c->nranks; ++r) in[r] = c->slot(r) + offset;
  kReduce[o.datatype]({in.data(), c->scalar(0), static_cast<char*>(out), o.count, c->nranks, o.redop});
}

std::string child_name(const std::string& parent, uint64_t split, int color) {
  // Two FNV-1a hashes of (parent, split, color): the same on every rank, short enough for any depth.
  std::string text = parent + "/" + std::to_string(split) + "/" + std::to_string(color);
  unsigned char bytes[16];
  for (int half = 0; half < 2; ++half) {
    uint64_t h = half == 0 ? 0xcbf29ce484222325ULL : 0x84222325cbf29ce4ULL;
    for (unsigned char ch : text) h = (h ^ ch) * 0x100000001b3ULL;
    memcpy(bytes + 8 * half, &h, 8);
  }
  return shm_name(bytes, sizeof bytes);
}

ncclResult_t split(Op& o, std::vector<ncclComm*>& children) {
  ncclComm* c = o.comm;
  const uint64_t index = c->splits++;  // every rank counts every split, NOCOLOR ones too
  *o.newcomm = nullptr;
  if (o.color == NCCL_SPLIT_NOCOLOR) return ncclSuccess;
  std::vector<std::array<int, 2>> members;  // (key, parent rank) of the ranks with my color
  for (int r = 0; r < c->nranks; ++r) {
    int theirs[2];
    memcpy(theirs, c->slot(r), sizeof theirs);
    if (theirs[0] == o.color) members.push_back({theirs[1], r});
  }
  std::sort(members.begin(), members.end());
  int rank = 0;
  while (members[rank][1] != c->rank) ++rank;
  ncclComm* child = nullptr;
  ncclResult_t result =
      join(child_name(c->name, index, o.color), static_cast<int>(members.size()), rank, c->cudev, &child);
  if (result != ncclSuccess) return result;
  *o.newcomm = child;
  children.push_back(child);
  return ncclSuccess;
}

ncclResult_t compute(Op& o, std::vector<ncclComm*>& children) {
  ncclComm* c = o.comm;
  const int n = c->nranks, me = c->rank;
  const size_t b = bytes_of(o);
  auto* out = static_cast<char*>(o.recv);
  switch (o.kind) {
    case Kind::AllReduce: reduce_into(o, 0, out); break;
    case Kind::Reduce:
      if (me == o.root) reduce_into(o, 0, out);
      break;
    case Kind::ReduceScatter: reduce_into(o, me * b, out); break;
    case Kind::Broadcast: copy(out, c->slot(o.root), b); break;
    case Kind::Scatter: copy(out, c->slot(o.root) + me * b, b); break;
    case Kind::AllGather:
      for (int r = 0; r < n; ++r) copy(out + r * b, c->slot(r), b);
      break;
    case Kind::Gather:
      for (int r = 0; r < n && me == o.root; ++r) copy(out + r * b, c->slot(r), b);
      break;
    case Kind::AlltoAll:
      for (int r = 0; r < n; ++r) copy(out + r * b, c->slot(r) + me * b, b);
      break;
    case Kind::Split: return split(o, children);
    default: break;
  }
  return ncclSuccess;
}

// Arrives for every live op of the round, then waits for each: one arrival per rank driven.
void barrier(const std::vector<Op*>& round) {
  std::vector<uint64_t> tokens(round.size());
  for (size_t i = 0; i < round.size(); ++i)
    if (!round[i]->comm->failed) tokens[i] = arrive(round[i]->comm);
  for (size_t i = 0; i < round.size(); ++i) {
    Op& o = *round[i];
    if (o.comm->failed) continue;
    ncclResult_t result = await(o.comm, tokens[i]);
    if (o.result == ncclSuccess) o.result = result;
  }
}

// Round j runs the j-th collective of every communicator the group queued on.
void run_collectives(const std::vector<Op*>& ops, std::vector<ncclComm*>& children) {
  std::vector<std::pair<ncclComm*, std::vector<Op*>>> queues;
  for (Op* o : ops) {
    auto q = std::find_if(queues.begin(), queues.end(), [&](auto& entry) { return entry.first == o->comm; });
    if (q == queues.end()) q = queues.insert(queues.end(), {o->comm, {}});
    q->second.push_back(o);
  }
  for (size_t j = 0;; ++j) {
    std::vector<Op*> round;
    for (auto& q : queues)
      if (j < q.second.size()) round.push_back(q.second[j]);
    if (round.empty()) return;
    for (Op* o : round) {
      if (o->comm->failed)
        o->result = fail(ncclRemoteError, "an earlier operation of this communicator failed");
      else
        contribute(*o);
    }
    barrier(round);
    for (Op* o : round)
      if (o->result == ncclSuccess && !o->comm->failed) o->result = compute(*o, children);
    barrier(round);  // nobody overwrites a slot that a peer still reads
  }
}

// The sends (or recvs) of a group from one rank to (or from) one peer, in call order.
struct Batch {
  ncclComm* comm;
  int peer;
  bool send;
  std::vector<Op*> ops;
  size_t bytes = 0;
};

std::vector<Batch> batches_of(const std::vector<Op*>& p2p) {
  std::vector<Batch> batches;
  for (Op* o : p2p) {
    const bool send = o->kind == Kind::Send;
    auto b = std::find_if(batches.begin(), batches.end(),
                          [&](const Batch& x) { return x.comm == o->comm && x.peer == o->root && x.send == send; });
    if (b == batches.end()) b = batches.insert(batches.end(), Batch{o->comm, o->root, send, {}});
    b->ops.push_back(o);
    b->bytes += bytes_of(*o);
  }
  return batches;
}

void set_result(Batch& b, ncclResult_t result) {
  for (Op* o : b.ops)
    if (o->result == ncclSuccess) o->result = result;
}

// All sends first (each waits only until the previous message to that peer was read), then the
// recvs: one thread can drive both ends, and only the two ranks of a pair wait for each other.
void run_p2p(std::vector<Batch>& batches) {
  for (Batch& b : batches) {
    if (!b.send) continue;
    ncclComm* c = b.comm;
    if (c->failed) {
      set_result(b, fail(ncclRemoteError, "an earlier operation of this communicator failed"));
      continue;
    }
    Pair& p = c->pair(c->rank, b.peer);
    std::string what = "rank " + std::to_string(b.peer) + " to receive the previous message";
    ncclResult_t result = comm_wait(
        c, [&] { return p.ack.load() == p.seq.load(); }, what.c_str());
    if (result != ncclSuccess) {
      set_result(b, result);
      continue;
    }
    char* to = c->mailbox(c->rank, b.peer);
    for (Op* o : b.ops) {
      copy(to, o->send, bytes_of(*o));
      to += bytes_of(*o);
    }
    p.bytes.store(b.bytes);
    p.seq.fetch_add(1);
  }
  for (Batch& b : batches) {
    if (b.send) continue;
    ncclComm* c = b.comm;
    if (c->failed) {
      set_result(b, fail(ncclRemoteError, "an earlier operation of this communicator failed"));
      continue;
    }
    Pair& p = c->pair(b.peer, c->rank);
    std::string what = "rank " + std::to_string(b.peer) + " to send";
    ncclResult_t result = comm_wait(
        c, [&] { return p.seq.load() != p.ack.load(); }, what.c_str());
    if (result != ncclSuccess) {
      set_result(b, result);
      continue;
    }
    const size_t sent = p.bytes.load();
    if (sent != b.bytes)
      set_result(b, fail(ncclInvalidUsage, "rank %d sent %zu bytes to rank %d, which receives %zu", b.peer, sent,
                         c->rank, b.bytes));
    const char* from = c->mailbox(b.peer, c->rank);
    size_t left = std::min(sent, b.bytes);
    for (Op* o : b.ops) {
      const size_t n = std::min(left, bytes_of(*o));
      copy(o->recv, from, n);
      from += n;
      left -= n;
    }
    p.ack.fetch_add(1);
  }
}

// Executes (and empties) this thread's group: pending inits, then the collectives in rounds,
// then send/recv, then the inits of the communicators that splits made. First failure wins.
ncclResult_t run_group() {
  Group g = std::move(group);
  group = Group{};
  ncclResult_t first = g.error;
  auto keep = [&](ncclResult_t result) {
    if (first == ncclSuccess) first = result;
  };
  for (ncclComm* c : g.inits) keep(finish_init(c));
  if (g.error != ncclSuccess) return first;
  std::vector<Op*> collectives, p2p;
  for (Op& o : g.ops) (o.kind == Kind::Send || o.kind == Kind::Recv ? p2p : collectives).push_back(&o);
  std::vector<Batch> batches = batches_of(p2p);
  for (const Batch& b : batches)  // the same totals on both ends: both fail, nobody waits
    if (b.bytes > b.comm->mailbox_bytes())
      return fail(ncclInvalidUsage, "%s of %zu bytes between ranks %d and %d exceed FAKE_NCCL_SLOT_BYTES/nranks (%zu)",
                  b.send ? "sends" : "recvs", b.bytes, b.comm->rank, b.peer, b.comm->mailbox_bytes());
  std::vector<ncclComm*> children;
  run_collectives(collectives, children);
  run_p2p(batches);
  for (ncclComm* c : children) keep(finish_init(c));
  for (const Op& o : g.ops) keep(o.result);
  return first;
}

ncclResult_t submit(const Op& o) {
  group.ops.push_back(o);
  return group.depth > 0 ? ncclSuccess : run_group();
}

// NCCL's argument checks (plus null buffers and the stand-in's slot size), then queue or run.
ncclResult_t post(Op o, ncclRedOp_t op, const char* function) {
  auto check = [&]() -> ncclResult_t {
    if (ncclResult_t r = check_comm(o.comm, function)) return r;
    if (o.datatype < 0 || o.datatype >= ncclNumTypes)
      return fail(ncclInvalidArgument, "%s : invalid type %d", function, o.datatype);
    const Kind k = o.kind;
    const int n = o.comm->nranks;
    if (k == Kind::AllReduce || k == Kind::Reduce || k == Kind::ReduceScatter) {
      if (op >= 0 && op < ncclNumOps) {
        o.redop = op;
      } else {
        auto user = o.comm->user_ops.find(op);
        if (user == o.comm->user_ops.end())
          return fail(ncclInvalidArgument, "%s : invalid reduction operation %d", function, static_cast<int>(op));
        if (user->second.datatype != o.datatype)
          return fail(ncclInvalidArgument, "%s : reduction operation %d was made for datatype %d, not %d", function,
                      static_cast<int>(op), user->second.datatype, o.datatype);
        o.redop = kPreMulSum;
        o.user = user->second;
      }
    }
    const bool p2p = k == Kind::Send || k == Kind::Recv;
    if ((p2p || k == Kind::Reduce || k == Kind::Broadcast || k == Kind::Gather || k == Kind::Scatter) &&
        (o.root < 0 || o.root >= n))
      return fail(ncclInvalidArgument, "%s : invalid %s %d (should be in the 0..%d range)", function,
                  p2p ? "peer" : "root", o.root, n - 1);
    const bool at_root = o.comm->rank == o.root;
    const bool needs_send = k != Kind::Recv && ((k != Kind::Broadcast && k != Kind::Scatter) || at_root);
    const bool needs_recv = k != Kind::Send && ((k != Kind::Reduce && k != Kind::Gather) || at_root);
    if (o.count > 0 && needs_send && o.send == nullptr)
      return fail(ncclInvalidArgument, "%s : sendbuff is NULL", function);
    if (o.count > 0 && needs_recv && o.recv == nullptr)
      return fail(ncclInvalidArgument, "%s : recvbuff is NULL", function);
    const size_t parts = k == Kind::ReduceScatter || k == Kind::AlltoAll || k == Kind::Scatter ? n : 1;
    const size_t room = p2p ? o.comm->mailbox_bytes() : o.comm->layout.slot;
    if (o.count > room / kTypeSize[o.datatype] / parts)
      return fail(
          ncclInvalidUsage,
          "%s : %zu elements of %zu bytes (times %zu) exceed the stand-in's %zu-byte slot (FAKE_NCCL_SLOT_BYTES%s)",
          function, o.count, kTypeSize[o.datatype], parts, room, p2p ? "/nranks" : "");
    return ncclSuccess;
  };
  if (ncclResult_t r = check()) return note(r);
  return submit(o);
}

void record_op(const char* function, const Op& o, const char* extra) {
  record(rank_of(o.comm), function, "count=%zu datatype=%d %ssendbuff=0x%lx recvbuff=0x%lx", o.count,
         static_cast<int>(o.datatype), extra, hex(o.send), hex(o.recv));
}

// Records one collective (its op where it reduces, its root where it has one) and runs it.
ncclResult_t collective(const char* function, const Op& o, ncclRedOp_t op, cudaStream_t stream) {
  const bool reduces = o.kind == Kind::AllReduce || o.kind == Kind::Reduce || o.kind == Kind::ReduceScatter;
  const bool rooted =
      o.kind == Kind::Reduce || o.kind == Kind::Broadcast || o.kind == Kind::Gather || o.kind == Kind::Scatter;
  char extra[64] = "";
  int at = 0;
  if (reduces) at += snprintf(extra + at, sizeof extra - at, "op=%d ", static_cast<int>(op));
  if (rooted) at += snprintf(extra + at, sizeof extra - at, "root=%d ", o.root);
  snprintf(extra + at, sizeof extra - at, "stream=0x%lx ", hex(stream));
  record_op(function, o, extra);
  return post(o, op, function);
}

ncclResult_t unsupported(const char* function) {
  return fail(ncclInvalidUsage, "%s: not in the stand-in (no device here)", function);
}

ncclResult_t make_id(ncclUniqueId* id) {
  memset(id, 0, sizeof *id);
  memcpy(id->internal, kIdMagic, sizeof kIdMagic);
  unsigned char* random = reinterpret_cast<unsigned char*>(id->internal) + sizeof kIdMagic;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  bool ok = fd >= 0 && read(fd, random, 16) == 16;
  if (fd >= 0) close(fd);
  if (!ok) {
    std::random_device device;
    for (int i = 0; i < 16; ++i) random[i] = static_cast<unsigned char>(device());
  }
  return ncclSuccess;
}

ncclResult_t check_config(const ncclConfig_t* config, const char* function) {
  if (config != nullptr && config->magic != 0xcafebeef)
    return fail(ncclInvalidArgument, "%s : config argument not initialized via NCCL_CONFIG_INITIALIZER", function);
  return ncclSuccess;
}

ncclResult_t init_rank(ncclComm_t* comm, int nranks, const ncclUniqueId* id, int rank, const ncclConfig_t* config,
                       const char* function) {
  if (comm == nullptr) return note(fail(ncclInvalidArgument, "%s : comm argument is NULL", function));
  *comm = nullptr;
  if (ncclResult_t r = check_config(config, function)) return note(r);
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return note(fail(ncclInvalidArgument, "%s : invalid rank %d or nranks %d", function, rank, nranks));
  if (id == nullptr || memcmp(id->internal, kIdMagic, sizeof kIdMagic) != 0)
    return note(
        fail(ncclInvalidArgument, "%s : the unique id was not made by this stand-in's ncclGetUniqueId", function));
  const int cudev = static_cast<int>(env_number("FAKE_NCCL_CUDEVICE", 0));
  ncclComm* c = nullptr;
  const auto* random = reinterpret_cast<const unsigned char*>(id->internal) + sizeof kIdMagic;
  if (ncclResult_t r = join(shm_name(random, 16), nranks, rank, cudev, &c)) return note(r);
  *comm = c;
  if (group.depth > 0) {  // one thread may init several ranks: meet them at the group's end
    group.inits.push_back(c);
    return ncclSuccess;
  }
  if (ncclResult_t r = finish_init(c)) {
    free_comm(c);
    *comm = nullptr;
    return r;
  }
  return ncclSuccess;
}

}  // namespace

// ---- nccl.h ----------------------------------------------------------------------------------

ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  record(-1, "ncclMemAlloc", "size=%zu", size);
  if (ptr == nullptr) return fail(ncclInvalidArgument, "ncclMemAlloc : ptr argument is NULL");
  if (posix_memalign(ptr, 4096, std::max<size_t>(size, 1)) != 0) {
    *ptr = nullptr;
    return fail(ncclSystemError, "ncclMemAlloc : cannot allocate %zu bytes", size);
  }
  return ncclSuccess;
}

ncclResult_t ncclMemFree(void* ptr) {
  record(-1, "ncclMemFree", "ptr=0x%lx", hex(ptr));
  free(ptr);
  return ncclSuccess;
}

ncclResult_t ncclGetVersion(int* version) {
  record(-1, "ncclGetVersion", "%s", "");
  if (version == nullptr) return fail(ncclInvalidArgument, "ncclGetVersion : version argument is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  record(-1, "ncclGetUniqueId", "%s", "");
  if (uniqueId == nullptr) return fail(ncclInvalidArgument, "ncclGetUniqueId : uniqueId argument is NULL");
  return make_id(uniqueId);
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config) {
  record(rank, "ncclCommInitRankConfig", "nranks=%d config=0x%lx", nranks, hex(config));
  return init_rank(comm, nranks, &commId, rank, config, "ncclCommInitRankConfig");
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  record(rank, "ncclCommInitRank", "nranks=%d", nranks);
  return init_rank(comm, nranks, &commId, rank, nullptr, "ncclCommInitRank");
}

ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds,
                                      ncclConfig_t* config) {
  record(myrank, "ncclCommInitRankScalable", "nranks=%d nId=%d config=0x%lx", nranks, nId, hex(config));
  if (nId < 1 || commIds == nullptr)
    return note(fail(ncclInvalidArgument, "ncclCommInitRankScalable : invalid nId %d or commIds NULL", nId));
  return init_rank(newcomm, nranks, &commIds[0], myrank, config, "ncclCommInitRankScalable");
}

ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  record(-1, "ncclCommInitAll", "ndev=%d devlist=0x%lx", ndev, hex(devlist));
  if (comm == nullptr) return note(fail(ncclInvalidArgument, "ncclCommInitAll : comm argument is NULL"));
  if (ndev < 1) return note(fail(ncclInvalidArgument, "ncclCommInitAll : invalid ndev %d", ndev));
  ncclUniqueId id;
  make_id(&id);
  const std::string name = shm_name(reinterpret_cast<const unsigned char*>(id.internal) + sizeof kIdMagic, 16);
  for (int i = 0; i < ndev; ++i) {
    if (ncclResult_t r = join(name, ndev, i, devlist != nullptr ? devlist[i] : i, &comm[i])) {
      while (i > 0) free_comm(comm[--i]);
      shm_unlink(name.c_str());
      return note(r);
    }
  }
  if (group.depth > 0) {
    group.inits.insert(group.inits.end(), comm, comm + ndev);
    return ncclSuccess;
  }
  ncclResult_t result = ncclSuccess;  // every rank arrived already: these waits return at once
  for (int i = 0; i < ndev; ++i)
    if (ncclResult_t r = finish_init(comm[i]); result == ncclSuccess) result = r;
  return result;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  record(rank_of(comm), "ncclCommFinalize", "%s", "");
  if (ncclResult_t r = check_comm(comm, "ncclCommFinalize")) return note(r);
  return submit(Op{Kind::Finalize, comm});  // a barrier: a collective, so it may be grouped
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  record(rank_of(comm), "ncclCommDestroy", "%s", "");
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  if (ncclResult_t r = check_comm(comm, "ncclCommDestroy")) return r;
  free_comm(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  record(rank_of(comm), "ncclCommAbort", "%s", "");
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  if (ncclResult_t r = check_comm(comm, "ncclCommAbort")) return r;
  comm->header()->aborted.store(1);
  free_comm(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  record(rank_of(comm), "ncclCommRevoke", "revokeFlags=%d", revokeFlags);
  return unsupported("ncclCommRevoke");
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  record(rank_of(comm), "ncclCommSplit", "color=%d key=%d config=0x%lx", color, key, hex(config));
  if (ncclResult_t r = check_comm(comm, "ncclCommSplit")) return note(r);
  if (newcomm == nullptr) return note(fail(ncclInvalidArgument, "ncclCommSplit : newcomm argument is NULL"));
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return note(fail(ncclInvalidArgument, "ncclCommSplit : invalid color %d", color));
  if (ncclResult_t r = check_config(config, "ncclCommSplit")) return note(r);
  Op o{Kind::Split, comm};
  o.color = color;
  o.key = key;
  o.newcomm = newcomm;
  return submit(o);
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm,
                            ncclConfig_t* config, int shrinkFlags) {
  record(rank_of(comm), "ncclCommShrink",
         "excludeRanksList=0x%lx excludeRanksCount=%d newcomm=0x%lx config=0x%lx shrinkFlags=%d", hex(excludeRanksList),
         excludeRanksCount, hex(newcomm), hex(config), shrinkFlags);
  return unsupported("ncclCommShrink");
}

const char* ncclGetErrorString(ncclResult_t result) {
  record(-1, "ncclGetErrorString", "result=%d", static_cast<int>(result));
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t comm) {
  record(rank_of(comm), "ncclGetLastError", "%s", "");
  return last_error.c_str();
}

void ncclResetDebugInit() { record(-1, "ncclResetDebugInit", "%s", ""); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  record(rank_of(comm), "ncclCommGetAsyncError", "%s", "");
  if (ncclResult_t r = check_comm(comm, "ncclCommGetAsyncError")) return r;
  if (asyncError == nullptr) return fail(ncclInvalidArgument, "ncclCommGetAsyncError : asyncError argument is NULL");
  *asyncError = comm->failed || comm->header()->aborted.load() != 0 ? ncclRemoteError : ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  record(rank_of(comm), "ncclCommCount", "%s", "");
  if (ncclResult_t r = check_comm(comm, "ncclCommCount")) return r;
  if (count == nullptr) return fail(ncclInvalidArgument, "ncclCommCount : count argument is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  record(rank_of(comm), "ncclCommCuDevice", "%s", "");
  if (ncclResult_t r = check_comm(comm, "ncclCommCuDevice")) return r;
  if (device == nullptr) return fail(ncclInvalidArgument, "ncclCommCuDevice : device argument is NULL");
  *device = comm->cudev;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  record(rank_of(comm), "ncclCommUserRank", "%s", "");
  if (ncclResult_t r = check_comm(comm, "ncclCommUserRank")) return r;
  if (rank == nullptr) return fail(ncclInvalidArgument, "ncclCommUserRank : rank argument is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

// Registration is a no-op here; the handle is the buffer's address (never NULL).
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  record(rank_of(comm), "ncclCommRegister", "buff=0x%lx size=%zu", hex(buff), size);
  if (ncclResult_t r = check_comm(comm, "ncclCommRegister")) return r;
  if (buff == nullptr || handle == nullptr)
    return fail(ncclInvalidArgument, "ncclCommRegister : buff or handle argument is NULL");
  *handle = buff;
  return ncclSuccess;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  record(rank_of(comm), "ncclCommDeregister", "handle=0x%lx", hex(handle));
  if (ncclResult_t r = check_comm(comm, "ncclCommDeregister")) return r;
  if (handle == nullptr) return fail(ncclInvalidArgument, "ncclCommDeregister : handle argument is NULL");
  return ncclSuccess;
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) {
  record(rank_of(comm), "ncclCommWindowRegister", "buff=0x%lx size=%zu winFlags=%d", hex(buff), size, winFlags);
  if (ncclResult_t r = check_comm(comm, "ncclCommWindowRegister")) return r;
  if (buff == nullptr || win == nullptr)
    return fail(ncclInvalidArgument, "ncclCommWindowRegister : buff or win argument is NULL");
  *win = static_cast<ncclWindow_t>(buff);
  return ncclSuccess;
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  record(rank_of(comm), "ncclCommWindowDeregister", "win=0x%lx", hex(win));
  if (ncclResult_t r = check_comm(comm, "ncclCommWindowDeregister")) return r;
  if (win == nullptr) return fail(ncclInvalidArgument, "ncclCommWindowDeregister : win argument is NULL");
  return ncclSuccess;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  record(rank_of(comm), "ncclRedOpCreatePreMulSum", "scalar=0x%lx datatype=%d residence=%d", hex(scalar),
         static_cast<int>(datatype), static_cast<int>(residence));
  if (ncclResult_t r = check_comm(comm, "ncclRedOpCreatePreMulSum")) return r;
  if (op == nullptr || scalar == nullptr)
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum : op or scalar argument is NULL");
  if (datatype < 0 || datatype >= ncclNumTypes)
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum : invalid type %d", datatype);
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum : invalid residence %d", residence);
  UserOp user{datatype, residence, {}, scalar};
  if (residence == ncclScalarHostImmediate) memcpy(user.value, scalar, kTypeSize[datatype]);
  const int value = comm->next_op++;
  comm->user_ops[value] = user;
  *op = static_cast<ncclRedOp_t>(value);
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  record(rank_of(comm), "ncclRedOpDestroy", "op=%d", static_cast<int>(op));
  if (ncclResult_t r = check_comm(comm, "ncclRedOpDestroy")) return r;
  if (comm->user_ops.erase(op) == 0)
    return fail(ncclInvalidArgument,
                "ncclRedOpDestroy : operation %d was not made by ncclRedOpCreatePreMulSum on this communicator",
                static_cast<int>(op));
  return ncclSuccess;
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  Op o{Kind::Reduce, comm, sendbuff, recvbuff, count, datatype};
  o.root = root;
  return collective("ncclReduce", o, op, stream);
}

ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  record(rank_of(comm), "ncclBcast", "count=%zu datatype=%d root=%d stream=0x%lx buff=0x%lx", count,
         static_cast<int>(datatype), root, hex(stream), hex(buff));
  Op o{Kind::Broadcast, comm, buff, buff, count, datatype};
  o.root = root;
  return post(o, ncclSum, "ncclBcast");
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  Op o{Kind::Broadcast, comm, sendbuff, recvbuff, count, datatype};
  o.root = root;
  return collective("ncclBroadcast", o, ncclSum, stream);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  Op o{Kind::AllReduce, comm, sendbuff, recvbuff, count, datatype};
  return collective("ncclAllReduce", o, op, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  Op o{Kind::ReduceScatter, comm, sendbuff, recvbuff, recvcount, datatype};
  return collective("ncclReduceScatter", o, op, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  Op o{Kind::AllGather, comm, sendbuff, recvbuff, sendcount, datatype};
  return collective("ncclAllGather", o, ncclSum, stream);
}

ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                          cudaStream_t stream) {
  Op o{Kind::AlltoAll, comm, sendbuff, recvbuff, count, datatype};
  return collective("ncclAlltoAll", o, ncclSum, stream);
}

ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream) {
  Op o{Kind::Gather, comm, sendbuff, recvbuff, count, datatype};
  o.root = root;
  return collective("ncclGather", o, ncclSum, stream);
}

ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) {
  Op o{Kind::Scatter, comm, sendbuff, recvbuff, count, datatype};
  o.root = root;
  return collective("ncclScatter", o, ncclSum, stream);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  record(rank_of(comm), "ncclSend", "count=%zu datatype=%d peer=%d stream=0x%lx sendbuff=0x%lx", count,
         static_cast<int>(datatype), peer, hex(stream), hex(sendbuff));
  Op o{Kind::Send, comm, sendbuff, nullptr, count, datatype};
  o.root = peer;
  return post(o, ncclSum, "ncclSend");
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  record(rank_of(comm), "ncclRecv", "count=%zu datatype=%d peer=%d stream=0x%lx recvbuff=0x%lx", count,
         static_cast<int>(datatype), peer, hex(stream), hex(recvbuff));
  Op o{Kind::Recv, comm, nullptr, recvbuff, count, datatype};
  o.root = peer;
  return post(o, ncclSum, "ncclRecv");
}

ncclResult_t ncclGroupStart() {
  record(-1, "ncclGroupStart", "depth=%d", group.depth);
  ++group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  record(-1, "ncclGroupEnd", "depth=%d", group.depth);
  if (group.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd: not in a group call");
  return --group.depth > 0 ? ncclSuccess : run_group();
}

ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  record(-1, "ncclGroupSimulateEnd", "depth=%d simInfo=0x%lx", group.depth, hex(simInfo));
  if (simInfo == nullptr || simInfo->magic != 0x74685283)
    return fail(ncclInvalidArgument,
                "ncclGroupSimulateEnd : simInfo argument not initialized via NCCL_SIM_INFO_INITIALIZER");
  if (group.depth == 0) return fail(ncclInvalidUsage, "ncclGroupSimulateEnd: not in a group call");
  simInfo->estimatedTime = 0;
  return --group.depth > 0 ? ncclSuccess : run_group();
}

// The profiling twins: the same functions under NCCL's pnccl names.
#define FAKE_NCCL_TWIN(name) extern "C" decltype(name) p##name __attribute__((alias(#name)));
FAKE_NCCL_TWIN(ncclMemAlloc)
FAKE_NCCL_TWIN(ncclMemFree)
FAKE_NCCL_TWIN(ncclGetVersion)
FAKE_NCCL_TWIN(ncclGetUniqueId)
FAKE_NCCL_TWIN(ncclCommInitRankConfig)
FAKE_NCCL_TWIN(ncclCommInitRank)
FAKE_NCCL_TWIN(ncclCommInitAll)
FAKE_NCCL_TWIN(ncclCommFinalize)
FAKE_NCCL_TWIN(ncclCommDestroy)
FAKE_NCCL_TWIN(ncclCommAbort)
FAKE_NCCL_TWIN(ncclCommRevoke)
FAKE_NCCL_TWIN(ncclCommSplit)
FAKE_NCCL_TWIN(ncclCommShrink)
FAKE_NCCL_TWIN(ncclCommInitRankScalable)
FAKE_NCCL_TWIN(ncclGetErrorString)
FAKE_NCCL_TWIN(ncclGetLastError)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
FAKE_NCCL_TWIN(ncclResetDebugInit)
#pragma GCC diagnostic pop
FAKE_NCCL_TWIN(ncclCommGetAsyncError)
FAKE_NCCL_TWIN(ncclCommCount)
FAKE_NCCL_TWIN(ncclCommCuDevice)
FAKE_NCCL_TWIN(ncclCommUserRank)
FAKE_NCCL_TWIN(ncclCommRegister)
FAKE_NCCL_TWIN(ncclCommDeregister)
FAKE_NCCL_TWIN(ncclCommWindowRegister)
FAKE_NCCL_TWIN(ncclCommWindowDeregister)
FAKE_NCCL_TWIN(ncclRedOpCreatePreMulSum)
FAKE_NCCL_TWIN(ncclRedOpDestroy)
FAKE_NCCL_TWIN(ncclReduce)
FAKE_NCCL_TWIN(ncclBcast)
FAKE_NCCL_TWIN(ncclBroadcast)
FAKE_NCCL_TWIN(ncclAllReduce)
FAKE_NCCL_TWIN(ncclReduceScatter)
FAKE_NCCL_TWIN(ncclAllGather)
FAKE_NCCL_TWIN(ncclAlltoAll)
FAKE_NCCL_TWIN(ncclGather)
FAKE_NCCL_TWIN(ncclScatter)
FAKE_NCCL_TWIN(ncclSend)
FAKE_NCCL_TWIN(ncclRecv)
FAKE_NCCL_TWIN(ncclGroupStart)
FAKE_NCCL_TWIN(ncclGroupEnd)
FAKE_NCCL_TWIN(ncclGroupSimulateEnd)
#undef FAKE_NCCL_TWIN

// ---- nccl_device.h: host functions of the device API (nothing to do without a device) ---------

ncclResult_t ncclDevCommCreate(ncclComm_t comm, ncclDevCommRequirements_t const* reqs, ncclDevComm_t* outDevComm) {
  record(rank_of(comm), "ncclDevCommCreate", "reqs=0x%lx outDevComm=0x%lx", hex(reqs), hex(outDevComm));
  return unsupported("ncclDevCommCreate");
}

ncclResult_t ncclDevCommDestroy(ncclComm_t comm, ncclDevComm_t const* devComm) {
  record(rank_of(comm), "ncclDevCommDestroy", "devComm=0x%lx", hex(devComm));
  return unsupported("ncclDevCommDestroy");
}

ncclTeam_t ncclTeamWorld(ncclComm_t comm) {
  record(rank_of(comm), "ncclTeamWorld", "%s", "");
  unsupported("ncclTeamWorld");
  return ncclTeam_t{};
}

ncclTeam_t ncclTeamLsa(ncclComm_t comm) {
  record(rank_of(comm), "ncclTeamLsa", "%s", "");
  unsupported("ncclTeamLsa");
  return ncclTeam_t{};
}

ncclTeam_t ncclTeamRail(ncclComm_t comm) {
  record(rank_of(comm), "ncclTeamRail", "%s", "");
  unsupported("ncclTeamRail");
  return ncclTeam_t{};
}

int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank) {
  record(rank_of(comm), "ncclTeamRankToWorld", "team.nRanks=%d team.rank=%d team.stride=%d rank=%d", team.nRanks,
         team.rank, team.stride, rank);
  unsupported("ncclTeamRankToWorld");
  return 0;
}

int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank) {
  record(rank_of(comm), "ncclTeamRankToLsa", "team.nRanks=%d team.rank=%d team.stride=%d rank=%d", team.nRanks,
         team.rank, team.stride, rank);
  unsupported("ncclTeamRankToLsa");
  return 0;
}

ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t* outHandle,
                                             ncclDevResourceRequirements_t* outReq) {
  record(-1, "ncclLsaBarrierCreateRequirement", "team.nRanks=%d nBarriers=%d outHandle=0x%lx outReq=0x%lx", team.nRanks,
         nBarriers, hex(outHandle), hex(outReq));
  return unsupported("ncclLsaBarrierCreateRequirement");
}

ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                             ncclGinBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  record(rank_of(comm), "ncclGinBarrierCreateRequirement", "team.nRanks=%d nBarriers=%d outHandle=0x%lx outReq=0x%lx",
         team.nRanks, nBarriers, hex(outHandle), hex(outReq));
  return unsupported("ncclGinBarrierCreateRequirement");
}

int ncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
  record(-1, "ncclLLA2ACalcSlots", "maxElts=%d maxEltSize=%d", maxElts, maxEltSize);
  unsupported("ncclLLA2ACalcSlots");
  return 0;
}

ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
                                        ncclDevResourceRequirements_t* outReq) {
  record(-1, "ncclLLA2ACreateRequirement", "nBlocks=%d nSlots=%d outHandle=0x%lx outReq=0x%lx", nBlocks, nSlots,
         hex(outHandle), hex(outReq));
  return unsupported("ncclLLA2ACreateRequirement");
}
