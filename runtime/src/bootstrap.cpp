#include "bootstrap.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>  // before Asio, whose awaitable.hpp uses std::exchange without it
#include <vector>

#include <boost/asio.hpp>
#include <fmt/format.h>

#include "ccc/errors.h"
#include "instantiate.h"  // kMaxRanks

namespace ccc {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
using Clock = std::chrono::steady_clock;
using ErrorCode = boost::system::error_code;

constexpr uint32_t kIdMagic = 0x63636342;  // "cccB"
constexpr uint32_t kProtocol = 3;
constexpr uint64_t kReplyMagic = 0x6363635265706c79;  // "cccReply": the answer comes from a ccc root
constexpr uint32_t kLastErrorKind = static_cast<uint32_t>(ErrorKind::Internal);
constexpr int kMapTries = 8;  // addresses the root proposes before it gives up
// A rank's hello arrives right after its connection: a connection silent for longer is not one.
constexpr std::chrono::seconds kHelloWait{10};
// The root's last word to the ranks (why it failed): no longer than this per rank.
constexpr std::chrono::seconds kFarewellWait{1};

// The unique id's layout inside its 128 bytes.
struct IdFields {
  uint32_t magic;
  uint32_t protocol;
  uint64_t tag;  // random per communicator: a rank with another communicator's id is refused
  uint8_t address[16];
  uint8_t v6;  // address holds an IPv6 address, else IPv4 in its first 4 bytes
  uint16_t port;
};
static_assert(sizeof(IdFields) <= sizeof(UniqueId::bytes));

// The messages: fixed-size structs, both ends being this library on one machine.
struct Hello {
  uint32_t magic, protocol;
  uint64_t tag;
  int32_t nranks, rank;
  ArenaKind kind;
  uint64_t part_bytes, total_bytes, alignment, timeout_ns;
};
enum class Kind : uint32_t { Failed, Accepted, Map, Go };
struct Reply {
  uint64_t magic = kReplyMagic;
  Kind kind;
  uint32_t error_kind;  // Failed: an ErrorKind
  uint64_t address;     // Map: where to map the arena
  uint64_t bytes;       // Accepted, Map: the arena's size
  char message[488];    // Failed: why
};
struct FdRequest {  // a rank on the root's Unix socket: its part's descriptor follows (cuda)
  uint64_t tag;
  int32_t rank;
};
struct Mapped {
  int32_t ok;
  uint64_t suggestion;  // not ok: where this rank could map it (0: no idea)
};

std::string unix_name(uint64_t tag) {
  std::string name(1, '\0');  // the abstract namespace: no file to remove, ever
  return name + fmt::format("ccc-bootstrap-{:016x}", tag);
}

// The control channel's socket, rank 0's (ControlChannel in bootstrap.h).
std::string control_name(uint64_t tag) {
  std::string name(1, '\0');
  return name + fmt::format("ccc-control-{:016x}", tag);
}

// The control channel's messages. A peer connects with a ControlHello; in each exchange every
// peer sends rank 0 a ControlHeader and its bytes, and rank 0 answers each with a ControlReply
// and, when ok, every rank's bytes.
struct ControlHello {
  uint64_t tag;
  int32_t rank;
};
struct ControlHeader {
  uint64_t exchange;  // how many exchanges this rank made before this one
  uint64_t bytes;
  char what[48];
};
struct ControlReply {
  uint32_t ok;
  uint32_t error_kind;  // not ok: an ErrorKind
  char message[488];    // not ok: why
};

Clock::time_point deadline_after(uint64_t ns) {
  constexpr uint64_t kFar = uint64_t{3600} * 24 * 365 * 1'000'000'000;  // a year: for ever
  return Clock::now() + std::chrono::nanoseconds(std::min(ns, kFar));
}

// Runs one asynchronous operation on `io` until it completes, `deadline` passes, or `stop` is set
// (polled, so another thread can end a wait): throws Error(Remote) on the deadline and
// Error(System) on a socket error, naming `what`.
struct Waiter {
  asio::io_context io;
  const std::atomic<bool>* stop = nullptr;

  template <typename Cancel, typename Start>
  void run(Clock::time_point deadline, const std::string& what, Cancel&& cancel, Start&& start) {
    ErrorCode result = asio::error::would_block;
    start([&result](const ErrorCode& ec, auto&&...) { result = ec; });
    io.restart();
    while (result == asio::error::would_block && Clock::now() < deadline && !(stop != nullptr && *stop)) {
      io.run_for(std::min<Clock::duration>(deadline - Clock::now(), std::chrono::milliseconds(50)));
      io.restart();
    }
    if (result == asio::error::would_block) {
      ErrorCode ignored;
      cancel(ignored);
      io.restart();
      io.run();  // the cancelled operation's handler, which refers to `result`
      throw Error(ErrorKind::Remote, fmt::format("{}: nothing within the timeout", what));
    }
    if (result) throw Error(ErrorKind::System, fmt::format("{}: {}", what, result.message()));
  }

  template <typename Socket>
  void write_bytes(Socket& s, const void* data, size_t bytes, Clock::time_point deadline, const std::string& what) {
    run(deadline, what, [&](ErrorCode& ec) { s.cancel(ec); },
        [&](auto handler) { asio::async_write(s, asio::buffer(data, bytes), handler); });
  }
  template <typename Socket>
  void read_bytes(Socket& s, void* data, size_t bytes, Clock::time_point deadline, const std::string& what) {
    run(deadline, what, [&](ErrorCode& ec) { s.cancel(ec); },
        [&](auto handler) { asio::async_read(s, asio::buffer(data, bytes), handler); });
  }
  template <typename Socket, typename T>
  void write(Socket& s, const T& msg, Clock::time_point deadline, const std::string& what) {
    write_bytes(s, &msg, sizeof msg, deadline, what);
  }
  template <typename Socket, typename T>
  void read(Socket& s, T& msg, Clock::time_point deadline, const std::string& what) {
    read_bytes(s, &msg, sizeof msg, deadline, what);
  }
};

class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  ~UniqueFd() { if (fd_ >= 0) ::close(fd_); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
 private:
  int fd_;
};

[[noreturn]] void system_error(const std::string& what) {
  throw Error(ErrorKind::System, fmt::format("{}: {}", what, std::strerror(errno)));
}

// A one-byte message with room for one file descriptor (SCM_RIGHTS). Not copyable: msg points
// into it.
struct FdMessage {
  char byte = 0;
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg{};
  FdMessage() {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
};

void send_fd(int socket, int fd, const char* what) {
  FdMessage m;
  msghdr& msg = m.msg;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  if (::sendmsg(socket, &msg, MSG_NOSIGNAL) != 1) system_error(fmt::format("bootstrap: sending {}", what));
}

int receive_fd(int socket, const char* what) {
  FdMessage m;
  msghdr& msg = m.msg;
  if (::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT) != 1) system_error(fmt::format("bootstrap: receiving {}", what));
  const cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS)
    throw Error(ErrorKind::System, fmt::format("bootstrap: {} came without its descriptor", what));
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

const char* kind_name(ArenaKind kind) { return kind == ArenaKind::Cuda ? "cuda" : "host"; }

Reply failure(ErrorKind kind, const std::string& message) {
  Reply r{};
  r.kind = Kind::Failed;
  r.error_kind = static_cast<uint32_t>(kind);
  std::snprintf(r.message, sizeof r.message, "%s", message.c_str());
  return r;
}

// One communicator's bootstrap root, on a thread of its own (bootstrap.h).
class Root {
 public:
  // `idle_ns`: how long it waits for its first rank before it gives up (bootstrap.h).
  Root(uint64_t tag, const asio::ip::address& address, uint64_t idle_ns)
      : tag_(tag), idle_ns_(idle_ns), idle_deadline_(deadline_after(idle_ns)), tcp_(waiter_.io, tcp::endpoint(address, 0)),
        unix_(waiter_.io, local::endpoint(unix_name(tag))) {
    waiter_.stop = &stop_;
    thread_ = std::thread([this] { serve(); });
  }
  ~Root() {
    stop_ = true;
    // A child forked after the root started has a copy of this object but not its thread: only
    // the process that started it joins it.
    if (::getpid() == pid_) {
      if (thread_.joinable()) thread_.join();
    } else {
      thread_.detach();
    }
  }
  Root(const Root&) = delete;
  Root& operator=(const Root&) = delete;

  // Waits until the root has served every rank (its own deadline bounds it), without stopping it.
  void wait() {
    if (::getpid() == pid_ && thread_.joinable()) thread_.join();
  }

  tcp::endpoint endpoint() const { return tcp_.local_endpoint(); }
  // Its thread has ended (it served its ranks, failed, or no rank came): destroying it waits for
  // nothing.
  bool finished() const { return finished_; }

 private:
  void serve() {
    try {
      gather();
      share_arena();
    } catch (const Error& e) {
      fail_all(e.kind(), e.what());
    } catch (const std::exception& e) {
      fail_all(ErrorKind::Internal, e.what());
    }
    // A finished root takes no more ranks: a late one gets "connection refused", not silence.
    ErrorCode ignored;
    tcp_.close(ignored);
    unix_.close(ignored);
    finished_ = true;
  }

  // Accepts ranks until all have said hello; the deadline runs from the first one.
  void gather() {
    Clock::time_point deadline = idle_deadline_;  // then the ranks' timeout from the first one
    int joined = 0;
    while (first_.nranks == 0 || joined < first_.nranks) {
      auto socket = std::make_unique<tcp::socket>(waiter_.io);
      try {
        waiter_.run(deadline, "waiting for ranks", [&](ErrorCode& ec) { tcp_.cancel(ec); },
                    [&](auto handler) { tcp_.async_accept(*socket, handler); });
      } catch (const Error&) {
        if (stop_) throw;
        if (first_.nranks == 0)
          throw Error(ErrorKind::Remote, fmt::format("bootstrap: no rank used the unique id within {:.3g} s of its "
                                                     "creation; it was released",
                                                     static_cast<double>(idle_ns_) / 1e9));
        std::string missing;
        for (int r = 0; r < first_.nranks; ++r)
          if (ranks_[r] == nullptr) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
        throw Error(ErrorKind::Remote, fmt::format("bootstrap: rank(s) {} of {} did not join within the timeout "
                                                   "({:.3g} s after the first rank)", missing, first_.nranks,
                                                   static_cast<double>(first_.timeout_ns) / 1e9));
      }
      Hello hello{};
      try {
        waiter_.read(*socket, hello, std::min(deadline, Clock::now() + kHelloWait), "bootstrap: reading a hello");
      } catch (const Error&) {
        continue;  // not one of ours, or gone
      }
      if (hello.magic != kIdMagic || hello.protocol != kProtocol || hello.tag != tag_) {
        refuse(*socket, ErrorKind::InvalidArgument,
               "bootstrap: the unique id belongs to another communicator (its session tag differs from the root's)");
        continue;
      }
      others_.push_back(std::move(socket));
      tcp::socket& s = *others_.back();
      if (first_.nranks == 0) {
        first_ = hello;
        ranks_.assign(hello.nranks, nullptr);
        deadline = deadline_after(hello.timeout_ns);
      }
      if (hello.nranks != first_.nranks)
        throw Error(ErrorKind::InvalidUsage, fmt::format("bootstrap: rank {} says the communicator has {} ranks, "
                                                         "rank {} said {}", hello.rank, hello.nranks, first_.rank,
                                                         first_.nranks));
      if (hello.kind != first_.kind)
        throw Error(ErrorKind::InvalidUsage, fmt::format("bootstrap: rank {} uses the {} backend, rank {} the {}: "
                                                         "every rank must use the same", hello.rank, kind_name(hello.kind),
                                                         first_.rank, kind_name(first_.kind)));
      if (hello.part_bytes != first_.part_bytes || hello.total_bytes != first_.total_bytes ||
          hello.alignment != first_.alignment)
        throw Error(ErrorKind::InvalidUsage, fmt::format("bootstrap: rank {} asks for {} arena bytes per rank, "
                                                         "rank {} for {}: every rank must pass the same",
                                                         hello.rank, hello.part_bytes, first_.rank, first_.part_bytes));
      if (hello.rank < 0 || hello.rank >= first_.nranks)
        throw Error(ErrorKind::InvalidArgument, fmt::format("bootstrap: rank {} is not a rank of {}", hello.rank,
                                                            first_.nranks));
      if (ranks_[hello.rank] != nullptr)
        throw Error(ErrorKind::InvalidUsage, fmt::format("bootstrap: two processes joined as rank {}", hello.rank));
      ranks_[hello.rank] = &s;
      ++joined;
    }
  }

  // Shares the arena's descriptors (bootstrap.h), then proposes addresses until every rank has
  // mapped it at one.
  void share_arena() {
    const uint64_t bytes = first_.total_bytes;
    const bool gather = first_.kind == ArenaKind::Cuda;  // else one memfd made here
    std::vector<std::unique_ptr<UniqueFd>> fds;
    if (!gather) {
      fds.push_back(std::make_unique<UniqueFd>(::memfd_create("ccc-arena", MFD_CLOEXEC)));
      if (fds[0]->get() < 0) system_error("bootstrap: memfd_create for the arena");
      if (::ftruncate(fds[0]->get(), static_cast<off_t>(bytes)) != 0)
        system_error(fmt::format("bootstrap: sizing the arena to {} bytes", bytes));
    } else {
      fds.resize(first_.nranks);
    }
    const Clock::time_point deadline = deadline_after(first_.timeout_ns);
    Reply accepted{};
    accepted.kind = Kind::Accepted;
    accepted.bytes = bytes;
    for (tcp::socket* s : ranks_) waiter_.write(*s, accepted, deadline, "bootstrap: answering a rank");
    // Every rank's Unix connection, kept until all have come (and sent their parts).
    std::vector<std::unique_ptr<local::socket>> connections(first_.nranks);
    for (int left = first_.nranks; left > 0;) {
      auto s = std::make_unique<local::socket>(waiter_.io);
      waiter_.run(deadline, "bootstrap: waiting for the ranks to share the arena",
                  [&](ErrorCode& ec) { unix_.cancel(ec); }, [&](auto handler) { unix_.async_accept(*s, handler); });
      FdRequest request{};
      waiter_.read(*s, request, deadline, "bootstrap: reading an arena request");
      if (request.tag != tag_ || request.rank < 0 || request.rank >= first_.nranks || connections[request.rank])
        continue;  // not one of this communicator's ranks coming for the first time
      if (gather) {
        waiter_.run(deadline, "bootstrap: waiting for a rank's part of the arena",
                    [&](ErrorCode& ec) { s->cancel(ec); },
                    [&](auto handler) { s->async_wait(local::socket::wait_read, handler); });
        fds[request.rank] = std::make_unique<UniqueFd>(receive_fd(s->native_handle(), "a rank's part of the arena"));
      }
      connections[request.rank] = std::move(s);
      --left;
    }
    for (auto& c : connections)
      for (auto& fd : fds) send_fd(c->native_handle(), fd->get(), "the arena to a rank");
    fds.clear();  // closed here: each rank holds its own copies now
    // Earlier proposals stay reserved here, so the next one lands elsewhere.
    std::vector<void*> tried;
    try_addresses(bytes, deadline, tried);
    for (void* p : tried) ::munmap(p, bytes);
  }

  // Proposes first what a rank that refused suggested (the CUDA driver, refusing a hint, says
  // where it would have reserved the range: free there, and likely in its peers, which run the
  // same driver), else free room in this process's address space.
  void try_addresses(uint64_t bytes, Clock::time_point deadline, std::vector<void*>& tried) {
    const uint64_t align = first_.alignment;
    std::vector<uint64_t> suggestions;  // the next proposals, newest last
    std::set<uint64_t> proposed;
    for (int attempt = 0; attempt < kMapTries; ++attempt) {
      uint64_t address = 0;
      while (address == 0 && !suggestions.empty()) {
        address = suggestions.back();
        suggestions.pop_back();
        if (address % align != 0 || proposed.contains(address)) address = 0;
      }
      if (address == 0) {
        void* room = ::mmap(nullptr, bytes + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (room == MAP_FAILED) system_error(fmt::format("bootstrap: finding {} bytes of address space", bytes));
        ::munmap(room, bytes + align);  // free again for the ranks (this process may be one of them)
        address = (reinterpret_cast<uintptr_t>(room) + align - 1) / align * align;
      }
      proposed.insert(address);
      void* probe = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
      Reply map{};
      map.kind = Kind::Map;
      map.address = address;
      map.bytes = bytes;
      for (tcp::socket* s : ranks_) waiter_.write(*s, map, deadline, "bootstrap: proposing an address");
      bool all = true;
      for (tcp::socket* s : ranks_) {
        Mapped m{};
        waiter_.read(*s, m, deadline, "bootstrap: waiting for a rank to map the arena");
        all = all && m.ok != 0;
        if (m.ok == 0 && m.suggestion != 0) suggestions.insert(suggestions.begin(), m.suggestion);
      }
      if (all) {
        Reply go{};
        go.kind = Kind::Go;
        go.address = map.address;
        for (tcp::socket* s : ranks_) waiter_.write(*s, go, deadline, "bootstrap: starting the ranks");
        return;
      }
      tried.push_back(::mmap(probe, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
      if (tried.back() == MAP_FAILED) tried.pop_back();
    }
    throw Error(ErrorKind::System, fmt::format("bootstrap: no address was free in every rank's process for the "
                                               "{}-byte arena after {} tries", bytes, kMapTries));
  }

  void refuse(tcp::socket& s, ErrorKind kind, const std::string& message) {
    try {
      waiter_.write(s, failure(kind, message), Clock::now() + kFarewellWait, "bootstrap: refusing a rank");
    } catch (const Error&) {
      // It learns nothing more, but its own deadline still ends its wait.
    }
  }

  void fail_all(ErrorKind kind, const std::string& message) {
    if (stop_) return;  // the process is going away: the ranks' deadlines end their waits
    for (auto& s : others_) refuse(*s, kind, message);
  }

  uint64_t tag_;
  uint64_t idle_ns_;
  Clock::time_point idle_deadline_;
  pid_t pid_ = ::getpid();
  std::atomic<bool> stop_ = false;
  std::atomic<bool> finished_ = false;
  Waiter waiter_;
  tcp::acceptor tcp_;
  local::acceptor unix_;
  Hello first_{};
  std::vector<std::unique_ptr<tcp::socket>> others_;  // every rank that said hello
  std::vector<tcp::socket*> ranks_;                   // [nranks], into others_
  std::thread thread_;  // last: started once the rest is built
};

// The roots this process serves, by tag. A rank joins its own process's root when done with it;
// one whose thread has ended (served by ranks of other processes, or never used) goes at the next
// bootstrap_unique_id; the rest stop when the process exits.
std::mutex roots_mutex;
std::map<uint64_t, std::unique_ptr<Root>>& roots() {
  static std::map<uint64_t, std::unique_ptr<Root>> map;
  return map;
}

IdFields parse(const UniqueId& id) {
  IdFields f{};
  std::memcpy(&f, id.bytes.data(), sizeof f);
  if (f.magic != kIdMagic || f.protocol != kProtocol)
    throw Error(ErrorKind::InvalidArgument, "not a unique id from cccGetUniqueId / Communicator::unique_id "
                                            "(or from another version of ccc)");
  return f;
}

tcp::endpoint root_endpoint(const IdFields& f) {
  if (f.v6 != 0) {
    asio::ip::address_v6::bytes_type b;
    std::copy(std::begin(f.address), std::end(f.address), b.begin());
    return {asio::ip::address_v6(b), f.port};
  }
  asio::ip::address_v4::bytes_type b;
  std::copy(f.address, f.address + 4, b.begin());
  return {asio::ip::address_v4(b), f.port};
}

}  // namespace

bool FdMmapMapper::map_at(uint64_t address, std::span<const int> fds) {
  if (fds.size() * part_ > total_)
    throw Error(ErrorKind::Internal, fmt::format("bootstrap: {} parts of {} bytes do not fit a {}-byte arena",
                                                 fds.size(), part_, total_));
  void* want = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
  void* got = ::mmap(want, total_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (got == MAP_FAILED) return false;
  if (got != want) {  // a kernel older than MAP_FIXED_NOREPLACE takes it as a hint
    ::munmap(got, total_);
    return false;
  }
  at_ = got;
  for (size_t i = 0; i < fds.size(); ++i) {  // over the reservation, which only this process sees
    void* part = static_cast<std::byte*>(want) + i * part_;
    if (::mmap(part, part_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fds[i], 0) == MAP_FAILED) {
      const int error = errno;
      unmap();
      errno = error;
      system_error(fmt::format("bootstrap: mapping rank {}'s part of the arena", i));
    }
  }
  return true;
}

void FdMmapMapper::unmap() {
  if (at_ != nullptr) ::munmap(at_, total_);
  at_ = nullptr;
}

void* FdMmapMapper::keep() {
  void* at = at_;
  at_ = nullptr;
  return at;
}

uint16_t bootstrap_port(const UniqueId& id) { return parse(id).port; }
uint64_t bootstrap_tag(const UniqueId& id) { return parse(id).tag; }

UniqueId bootstrap_unique_id(uint64_t idle_ns) {
  const char* env = std::getenv("CCC_BOOTSTRAP_ADDR");
  const std::string text = env != nullptr && *env != '\0' ? env : "127.0.0.1";
  ErrorCode ec;
  const asio::ip::address address = asio::ip::make_address(text, ec);
  if (ec)
    throw Error(ErrorKind::InvalidArgument,
                fmt::format("CCC_BOOTSTRAP_ADDR={}: not an IPv4 or IPv6 address to listen on", text));
  std::random_device random;
  const uint64_t tag = (uint64_t{random()} << 32) ^ random();
  IdFields f{};
  f.magic = kIdMagic;
  f.protocol = kProtocol;
  f.tag = tag;
  std::lock_guard lock(roots_mutex);
  std::erase_if(roots(), [](const auto& entry) { return entry.second->finished(); });
  std::unique_ptr<Root> root;
  try {
    root = std::make_unique<Root>(tag, address, idle_ns);
  } catch (const boost::system::system_error& e) {
    throw Error(ErrorKind::System, fmt::format("bootstrap: cannot listen on {}: {}", text, e.what()));
  } catch (const std::system_error& e) {
    throw Error(ErrorKind::System, fmt::format("bootstrap: cannot start the root thread: {}", e.what()));
  }
  const tcp::endpoint at = root->endpoint();
  f.port = at.port();
  if (at.address().is_v6()) {
    f.v6 = 1;
    const auto b = at.address().to_v6().to_bytes();
    std::copy(b.begin(), b.end(), f.address);
  } else {
    const auto b = at.address().to_v4().to_bytes();
    std::copy(b.begin(), b.end(), f.address);
  }
  roots()[tag] = std::move(root);
  UniqueId id;
  std::memcpy(id.bytes.data(), &f, sizeof f);
  return id;
}

struct ControlChannel::Impl {
  int rank = 0, nranks = 0;
  uint64_t tag = 0, timeout_ns = 0;
  uint64_t exchanges = 0;  // made so far
  std::string broken;      // why an earlier exchange failed, or ""
  Waiter waiter;
  std::unique_ptr<local::acceptor> acceptor;       // rank 0, until every peer has connected
  std::vector<std::unique_ptr<local::socket>> peers;  // rank 0: by rank ([0] empty); others: [0], rank 0

  // Rank 0, before its hello: the peers connect once the join succeeds, which needs this hello.
  void listen() {
    try {
      acceptor = std::make_unique<local::acceptor>(waiter.io, local::endpoint(control_name(tag)));
    } catch (const boost::system::system_error& e) {
      throw Error(ErrorKind::System, fmt::format("control channel: cannot listen: {}", e.what()));
    }
  }

  // After the join: rank 0 takes every peer's connection, the others connect.
  void connect() {
    const Clock::time_point deadline = deadline_after(timeout_ns);
    peers.resize(rank == 0 ? nranks : 1);
    if (rank != 0) {
      peers[0] = std::make_unique<local::socket>(waiter.io);
      local::socket& s = *peers[0];
      waiter.run(deadline, "control channel: connecting to rank 0", [&](ErrorCode& ec) { s.close(ec); },
                 [&](auto handler) { s.async_connect(local::endpoint(control_name(tag)), handler); });
      waiter.write(s, ControlHello{tag, rank}, deadline, "control channel: saying hello to rank 0");
      return;
    }
    for (int left = nranks - 1; left > 0;) {
      auto s = std::make_unique<local::socket>(waiter.io);
      try {
        waiter.run(deadline, "control channel: waiting for the ranks", [&](ErrorCode& ec) { acceptor->cancel(ec); },
                   [&](auto handler) { acceptor->async_accept(*s, handler); });
      } catch (const Error&) {
        std::string missing;
        for (int r = 1; r < nranks; ++r)
          if (!peers[r]) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
        throw Error(ErrorKind::Remote, fmt::format("control channel: rank(s) {} did not connect within the timeout "
                                                   "after joining", missing));
      }
      ControlHello hello{};
      try {
        waiter.read(*s, hello, std::min(deadline, Clock::now() + kHelloWait), "control channel: reading a hello");
      } catch (const Error&) {
        continue;  // not one of ours, or gone
      }
      if (hello.tag != tag || hello.rank <= 0 || hello.rank >= nranks || peers[hello.rank]) continue;
      peers[hello.rank] = std::move(s);
      --left;
    }
    acceptor.reset();  // a late connection gets "connection refused"
  }

  [[noreturn]] void fail(ErrorKind kind, const std::string& message) {
    broken = message;
    throw Error(kind, message);
  }

  std::vector<std::byte> all_gather(std::span<const std::byte> mine, const std::string& what) {
    if (!broken.empty())
      throw Error(ErrorKind::Remote, fmt::format("control channel: an earlier exchange failed ({}); destroy the "
                                                 "communicator", broken));
    ControlHeader header{};
    header.exchange = exchanges++;
    header.bytes = mine.size();
    std::snprintf(header.what, sizeof header.what, "%s", what.c_str());
    std::vector<std::byte> all(mine.size() * static_cast<size_t>(nranks));
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<ptrdiff_t>(mine.size()) * rank);
    if (rank == 0)
      gather(header, all, what);
    else
      ask(header, mine, all, what);
    return all;
  }

  // Rank 0: every peer's part, in rank order, then the answer to all.
  void gather(const ControlHeader& mine, std::vector<std::byte>& all, const std::string& what) {
    const Clock::time_point deadline = deadline_after(timeout_ns);
    for (int r = 1; r < nranks; ++r) {
      ControlHeader h{};
      try {
        waiter.read(*peers[r], h, deadline, "");
        h.what[sizeof h.what - 1] = '\0';
        if (h.exchange != mine.exchange || std::strcmp(h.what, mine.what) != 0 || h.bytes != mine.bytes)
          answer_failure(ErrorKind::InvalidUsage,
                         fmt::format("control channel: rank {} made {} (its exchange #{}) while rank 0 made {} (#{}): "
                                     "every rank must make the same collective calls in the same order",
                                     r, h.what, h.exchange, what, mine.exchange));
        waiter.read_bytes(*peers[r], all.data() + mine.bytes * r, mine.bytes, deadline, "");
      } catch (const Error& e) {
        if (!broken.empty()) throw;  // answer_failure's
        answer_failure(ErrorKind::Remote,
                       e.kind() == ErrorKind::Remote
                           ? fmt::format("control channel: rank {} did not take part in {} within the timeout ({:.3g} s)",
                                         r, what, static_cast<double>(timeout_ns) / 1e9)
                           : fmt::format("control channel: rank {}'s connection closed during {} (its process ended, "
                                         "or it destroyed the communicator)", r, what));
      }
    }
    ControlReply ok{};
    ok.ok = 1;
    for (int r = 1; r < nranks; ++r) {
      try {
        waiter.write(*peers[r], ok, deadline, "");
        waiter.write_bytes(*peers[r], all.data(), all.size(), deadline, "");
      } catch (const Error&) {
        fail(ErrorKind::Remote, fmt::format("control channel: rank {} went away before it got the result of {}", r, what));
      }
    }
  }

  // Rank 0: tells every peer why the exchange failed (a bounded wait each), then throws it.
  [[noreturn]] void answer_failure(ErrorKind kind, const std::string& message) {
    ControlReply r{};
    r.error_kind = static_cast<uint32_t>(kind);
    std::snprintf(r.message, sizeof r.message, "%s", message.c_str());
    for (int p = 1; p < nranks; ++p) {
      try {
        waiter.write(*peers[p], r, Clock::now() + kFarewellWait, "");
      } catch (const Error&) {
        // That rank learns nothing more; its own deadline ends its wait.
      }
    }
    fail(kind, message);
  }

  // A peer: its part to rank 0, then rank 0's answer.
  void ask(const ControlHeader& header, std::span<const std::byte> mine, std::vector<std::byte>& all,
           const std::string& what) {
    const uint64_t wait = timeout_ns == ~0ULL ? ~0ULL : timeout_ns + timeout_ns / 2;
    const Clock::time_point deadline = deadline_after(wait);
    local::socket& s = *peers[0];
    ControlReply reply{};
    try {
      waiter.write(s, header, deadline, "");
      waiter.write_bytes(s, mine.data(), mine.size(), deadline, "");
      waiter.read(s, reply, deadline, "");
    } catch (const Error& e) {
      fail(ErrorKind::Remote,
           e.kind() == ErrorKind::Remote
               ? fmt::format("control channel: no answer from rank 0 to {} within the timeout (rank 0 never made "
                             "this call, or is stuck)", what)
               : fmt::format("control channel: rank 0's connection closed during {} (its process ended, or it "
                             "destroyed the communicator)", what));
    }
    if (reply.ok == 0) {
      reply.message[sizeof reply.message - 1] = '\0';
      fail(static_cast<ErrorKind>(reply.error_kind), reply.message);
    }
    try {
      waiter.read_bytes(s, all.data(), all.size(), deadline, "");
    } catch (const Error&) {
      fail(ErrorKind::Remote, fmt::format("control channel: rank 0 went away while sending the result of {}", what));
    }
  }
};

ControlChannel::ControlChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlChannel::~ControlChannel() = default;
int ControlChannel::rank() const { return impl_->rank; }
int ControlChannel::nranks() const { return impl_->nranks; }
std::vector<std::byte> ControlChannel::all_gather(std::span<const std::byte> mine, const std::string& what) {
  return impl_->all_gather(mine, what);
}

uint64_t bootstrap_join(const UniqueId& id, const JoinRequest& request, ArenaMapper& mapper,
                        std::unique_ptr<ControlChannel>* control) {
  const IdFields f = parse(id);
  if (request.nranks < 1 || request.nranks > kMaxRanks)
    throw Error(ErrorKind::InvalidArgument, fmt::format("a communicator has 1 .. {} ranks, got {}", kMaxRanks,
                                                        request.nranks));
  if (request.rank < 0 || request.rank >= request.nranks)
    throw Error(ErrorKind::InvalidArgument, fmt::format("rank {} is not a rank of {} (0..{})", request.rank,
                                                        request.nranks, request.nranks - 1));
  // This process's root (if it is the one) is done once this rank is: join its thread then. A
  // rank that joined lets it finish telling the others to go (they may not have heard yet); one
  // that failed stops it, so its peers learn at once.
  struct JoinRoot {
    uint64_t tag;
    bool joined = false;
    ~JoinRoot() {
      std::unique_ptr<Root> root;
      {
        std::lock_guard lock(roots_mutex);
        if (auto it = roots().find(tag); it != roots().end()) {
          root = std::move(it->second);
          roots().erase(it);
        }
      }
      if (root && joined) root->wait();
    }
  } join_root{f.tag};

  const uint64_t wait = request.timeout_ns == ~0ULL ? ~0ULL : request.timeout_ns + request.timeout_ns / 2;
  const Clock::time_point deadline = deadline_after(wait);
  const tcp::endpoint root = root_endpoint(f);
  const std::string at = fmt::format("bootstrap root {}:{}", root.address().to_string(), root.port());
  Waiter w;
  tcp::socket s(w.io);
  w.run(deadline, "connecting to the " + at, [&](ErrorCode& ec) { s.close(ec); },
        [&](auto handler) { s.async_connect(root, handler); });
  if (request.alignment == 0 || (request.alignment & (request.alignment - 1)) != 0)
    throw Error(ErrorKind::Internal, fmt::format("bootstrap: alignment {} is not a power of two", request.alignment));
  if ((request.kind == ArenaKind::Cuda) != (request.part_fd >= 0))
    throw Error(ErrorKind::Internal, "bootstrap: a CUDA rank shares its part, a host rank none");
  std::unique_ptr<ControlChannel::Impl> channel;
  if (control != nullptr) {
    channel = std::make_unique<ControlChannel::Impl>();
    channel->rank = request.rank;
    channel->nranks = request.nranks;
    channel->tag = f.tag;
    channel->timeout_ns = request.timeout_ns;
    if (request.rank == 0) channel->listen();
  }
  const Hello hello{kIdMagic,           kProtocol,          f.tag,
                    request.nranks,     request.rank,       request.kind,
                    request.part_bytes, request.total_bytes, request.alignment,
                    request.timeout_ns};
  w.write(s, hello, deadline, "bootstrap: saying hello to the " + at);

  auto answer = [&](const char* what) {
    Reply r{};
    try {
      w.read(s, r, deadline, fmt::format("bootstrap: waiting for the {} ({})", at, what));
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Remote)
        throw Error(ErrorKind::Remote, fmt::format("{} (a rank that never joined, or a root that is gone)", e.what()));
      throw;
    }
    // A port that answers, but not as a root of ours: an id from elsewhere, or one whose root
    // has gone and whose port another program took since.
    if (r.magic != kReplyMagic || r.kind > Kind::Go || (r.kind == Kind::Failed && r.error_kind > kLastErrorKind))
      throw Error(ErrorKind::InvalidArgument,
                  fmt::format("bootstrap: {} answered, but not as a ccc bootstrap root (the unique id is not one "
                              "cccGetUniqueId made for this communicator, or its root is gone and another program "
                              "listens on its port now)",
                              at));
    if (r.kind == Kind::Failed) {
      r.message[sizeof r.message - 1] = '\0';
      throw Error(static_cast<ErrorKind>(r.error_kind), r.message);
    }
    return r;
  };
  const Reply accepted = answer("every rank to join");
  if (accepted.kind != Kind::Accepted) throw Error(ErrorKind::Internal, "bootstrap: the root answered out of turn");

  local::socket u(w.io);
  w.run(deadline, "bootstrap: connecting to the root's Unix socket", [&](ErrorCode& ec) { u.close(ec); },
        [&](auto handler) { u.async_connect(local::endpoint(unix_name(f.tag)), handler); });
  w.write(u, FdRequest{f.tag, request.rank}, deadline, "bootstrap: asking for the arena");
  if (request.part_fd >= 0) send_fd(u.native_handle(), request.part_fd, "this rank's part of the arena to the root");
  std::vector<std::unique_ptr<UniqueFd>> fds;  // closed when this returns: the mapper imported them
  const int expected = request.kind == ArenaKind::Cuda ? request.nranks : 1;
  for (int i = 0; i < expected; ++i) {
    w.run(deadline, "bootstrap: waiting for the arena", [&](ErrorCode& ec) { u.cancel(ec); },
          [&](auto handler) { u.async_wait(local::socket::wait_read, handler); });
    fds.push_back(std::make_unique<UniqueFd>(receive_fd(u.native_handle(), "the arena")));
  }
  std::vector<int> raw;
  for (const auto& fd : fds) raw.push_back(fd->get());

  bool mapped = false;
  for (;;) {
    const Reply r = answer("the arena's address");
    if (r.kind == Kind::Go) {
      if (!mapped) throw Error(ErrorKind::Internal, "bootstrap: started without a mapped arena");
      join_root.joined = true;
      if (channel) {
        channel->connect();
        *control = std::make_unique<ControlChannel>(std::move(channel));
      }
      return r.address;
    }
    if (r.kind != Kind::Map || r.bytes != request.total_bytes)
      throw Error(ErrorKind::Internal, "bootstrap: the root answered out of turn");
    if (mapped) mapper.unmap();  // a peer could not map it there
    mapped = mapper.map_at(r.address, raw);
    w.write(s, Mapped{mapped, mapped ? 0 : mapper.suggestion()}, deadline,
            "bootstrap: telling the root whether the arena mapped");
  }
}

}  // namespace ccc
