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
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <fmt/format.h>

#include "ccc/instantiate.h"  // kMaxRanks

namespace ccc {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using local = asio::local::stream_protocol;
using Clock = std::chrono::steady_clock;
using ErrorCode = boost::system::error_code;

constexpr uint32_t kIdMagic = 0x63636342;  // "cccB"
constexpr uint32_t kProtocol = 1;
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
  uint64_t heap_bytes, timeout_ns;
};
enum class Kind : uint32_t { Failed, Accepted, Map, Go };
struct Reply {
  Kind kind;
  uint32_t error_kind;  // Failed: an ErrorKind
  uint64_t address;     // Map: where to map the arena
  uint64_t bytes;       // Accepted, Map: the arena's size
  char message[488];    // Failed: why
};
struct FdRequest {  // a rank asking the root's Unix socket for the arena's descriptor
  uint64_t tag;
  int32_t rank;
};
struct Mapped {
  int32_t ok;
};

std::string unix_name(uint64_t tag) {
  std::string name(1, '\0');  // the abstract namespace: no file to remove, ever
  return name + fmt::format("ccc-bootstrap-{:016x}", tag);
}

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

  template <typename Socket, typename T>
  void write(Socket& s, const T& msg, Clock::time_point deadline, const std::string& what) {
    run(deadline, what, [&](ErrorCode& ec) { s.cancel(ec); },
        [&](auto handler) { asio::async_write(s, asio::buffer(&msg, sizeof msg), handler); });
  }
  template <typename Socket, typename T>
  void read(Socket& s, T& msg, Clock::time_point deadline, const std::string& what) {
    run(deadline, what, [&](ErrorCode& ec) { s.cancel(ec); },
        [&](auto handler) { asio::async_read(s, asio::buffer(&msg, sizeof msg), handler); });
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

void send_fd(int socket, int fd) {
  FdMessage m;
  msghdr& msg = m.msg;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  if (::sendmsg(socket, &msg, MSG_NOSIGNAL) != 1) system_error("bootstrap: sending the arena to a rank");
}

int receive_fd(int socket) {
  FdMessage m;
  msghdr& msg = m.msg;
  if (::recvmsg(socket, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT) != 1) system_error("bootstrap: receiving the arena");
  const cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (c == nullptr || c->cmsg_type != SCM_RIGHTS)
    throw Error(ErrorKind::System, "bootstrap: the root's answer carried no arena descriptor");
  int fd = -1;
  std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
  return fd;
}

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
  Root(uint64_t tag, const asio::ip::address& address)
      : tag_(tag), tcp_(waiter_.io, tcp::endpoint(address, 0)), unix_(waiter_.io, local::endpoint(unix_name(tag))) {
    waiter_.stop = &stop_;
    thread_ = std::thread([this] { serve(); });
  }
  ~Root() {
    stop_ = true;
    if (!thread_.joinable()) return;  // finish() joined it
    // A child forked after the root started has a copy of this object but not its thread: only
    // the process that started it joins it.
    if (::getpid() == pid_)
      thread_.join();
    else
      thread_.detach();
  }

  // Waits until the root has served every rank, without stopping it: once a rank of this process
  // has its arena, the root is still sending the other ranks their last answers (each write
  // bounded by the deadline), and stopping it then would cut them off.
  void finish() {
    if (::getpid() == pid_) thread_.join();
  }
  Root(const Root&) = delete;
  Root& operator=(const Root&) = delete;

  tcp::endpoint endpoint() const { return tcp_.local_endpoint(); }

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
  }

  // Accepts ranks until all have said hello; the deadline runs from the first one.
  void gather() {
    Clock::time_point deadline = Clock::time_point::max();
    int joined = 0;
    while (first_.nranks == 0 || joined < first_.nranks) {
      auto socket = std::make_unique<tcp::socket>(waiter_.io);
      try {
        waiter_.run(deadline, "waiting for ranks", [&](ErrorCode& ec) { tcp_.cancel(ec); },
                    [&](auto handler) { tcp_.async_accept(*socket, handler); });
      } catch (const Error&) {
        if (stop_) throw;
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
      if (hello.heap_bytes != first_.heap_bytes)
        throw Error(ErrorKind::InvalidUsage, fmt::format("bootstrap: rank {} asks for {} arena bytes per rank, "
                                                         "rank {} for {}: every rank must pass the same",
                                                         hello.rank, hello.heap_bytes, first_.rank, first_.heap_bytes));
      if (hello.rank < 0 || hello.rank >= first_.nranks)
        throw Error(ErrorKind::InvalidArgument, fmt::format("bootstrap: rank {} is not a rank of {}", hello.rank,
                                                            first_.nranks));
      if (ranks_[hello.rank] != nullptr)
        throw Error(ErrorKind::InvalidUsage, fmt::format("bootstrap: two processes joined as rank {}", hello.rank));
      ranks_[hello.rank] = &s;
      ++joined;
    }
  }

  // Creates the arena, hands every rank its descriptor, and proposes addresses until every rank
  // has mapped it at one.
  void share_arena() {
    const uint64_t bytes = HostArena::total_bytes(first_.nranks, first_.heap_bytes);
    UniqueFd fd(::memfd_create("ccc-arena", MFD_CLOEXEC));
    if (fd.get() < 0) system_error("bootstrap: memfd_create for the arena");
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
      system_error(fmt::format("bootstrap: sizing the arena to {} bytes", bytes));
    const Clock::time_point deadline = deadline_after(first_.timeout_ns);
    Reply accepted{};
    accepted.kind = Kind::Accepted;
    accepted.bytes = bytes;
    for (tcp::socket* s : ranks_) waiter_.write(*s, accepted, deadline, "bootstrap: answering a rank");
    std::vector<bool> served(first_.nranks, false);
    for (int left = first_.nranks; left > 0;) {
      local::socket s(waiter_.io);
      waiter_.run(deadline, "bootstrap: waiting for the ranks to fetch the arena",
                  [&](ErrorCode& ec) { unix_.cancel(ec); }, [&](auto handler) { unix_.async_accept(s, handler); });
      FdRequest request{};
      waiter_.read(s, request, deadline, "bootstrap: reading an arena request");
      if (request.tag != tag_ || request.rank < 0 || request.rank >= first_.nranks || served[request.rank])
        continue;  // not one of this communicator's ranks asking for the first time
      send_fd(s.native_handle(), fd.get());
      served[request.rank] = true;
      --left;
    }
    // Earlier proposals stay reserved here, so the next one lands elsewhere.
    std::vector<void*> tried;
    try_addresses(bytes, deadline, tried);
    for (void* p : tried) ::munmap(p, bytes);
  }

  void try_addresses(uint64_t bytes, Clock::time_point deadline, std::vector<void*>& tried) {
    for (int attempt = 0; attempt < kMapTries; ++attempt) {
      void* probe = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (probe == MAP_FAILED) system_error(fmt::format("bootstrap: finding {} bytes of address space", bytes));
      ::munmap(probe, bytes);  // free again for the ranks (this process may be one of them)
      Reply map{};
      map.kind = Kind::Map;
      map.address = reinterpret_cast<uintptr_t>(probe);
      map.bytes = bytes;
      for (tcp::socket* s : ranks_) waiter_.write(*s, map, deadline, "bootstrap: proposing an address");
      bool all = true;
      for (tcp::socket* s : ranks_) {
        Mapped m{};
        waiter_.read(*s, m, deadline, "bootstrap: waiting for a rank to map the arena");
        all = all && m.ok != 0;
      }
      if (all) {
        Reply go{};
        go.kind = Kind::Go;
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
  pid_t pid_ = ::getpid();
  std::atomic<bool> stop_ = false;
  Waiter waiter_;
  tcp::acceptor tcp_;
  local::acceptor unix_;
  Hello first_{};
  std::vector<std::unique_ptr<tcp::socket>> others_;  // every rank that said hello
  std::vector<tcp::socket*> ranks_;                   // [nranks], into others_
  std::thread thread_;  // last: started once the rest is built
};

// The roots this process serves, by tag. A rank joins its own process's root when done with it;
// the rest stop when the process exits.
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

void* map_at(int fd, uint64_t address, uint64_t bytes) {
  void* want = reinterpret_cast<void*>(static_cast<uintptr_t>(address));
  void* got = ::mmap(want, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
  if (got == MAP_FAILED) return nullptr;
  if (got != want) {  // a kernel older than MAP_FIXED_NOREPLACE takes it as a hint
    ::munmap(got, bytes);
    return nullptr;
  }
  return got;
}

}  // namespace

UniqueId bootstrap_unique_id() {
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
  std::unique_ptr<Root> root;
  try {
    root = std::make_unique<Root>(tag, address);
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

std::unique_ptr<HostArena> bootstrap_join(const UniqueId& id, const JoinRequest& request) {
  const IdFields f = parse(id);
  if (request.nranks < 1 || request.nranks > kMaxRanks)
    throw Error(ErrorKind::InvalidArgument, fmt::format("a communicator has 1 .. {} ranks, got {}", kMaxRanks,
                                                        request.nranks));
  if (request.rank < 0 || request.rank >= request.nranks)
    throw Error(ErrorKind::InvalidArgument, fmt::format("rank {} is not a rank of {} (0..{})", request.rank,
                                                        request.nranks, request.nranks - 1));
  // This process's root (if it is the one, as when rank 0 made the id) is done once this rank is:
  // join its thread then. A rank that joined lets it finish serving the others; one that failed
  // stops it (the others fail too, at the latest by their deadlines).
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
      if (root && joined) root->finish();
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
  const Hello hello{kIdMagic, kProtocol, f.tag, request.nranks, request.rank, request.heap_bytes, request.timeout_ns};
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
  w.run(deadline, "bootstrap: waiting for the arena", [&](ErrorCode& ec) { u.cancel(ec); },
        [&](auto handler) { u.async_wait(local::socket::wait_read, handler); });
  const UniqueFd fd(receive_fd(u.native_handle()));

  struct Mapping {  // unmapped unless the arena takes it over
    void* at = nullptr;
    uint64_t bytes = 0;
    ~Mapping() { if (at != nullptr) ::munmap(at, bytes); }
  } mapping;
  for (;;) {
    const Reply r = answer("the arena's address");
    if (r.kind == Kind::Go) {
      if (mapping.at == nullptr) throw Error(ErrorKind::Internal, "bootstrap: started without a mapped arena");
      auto arena = std::make_unique<HostArena>(mapping.at, request.nranks, request.rank, request.heap_bytes);
      mapping.at = nullptr;
      join_root.joined = true;
      return arena;
    }
    if (r.kind != Kind::Map || r.bytes != HostArena::total_bytes(request.nranks, request.heap_bytes))
      throw Error(ErrorKind::Internal, "bootstrap: the root answered out of turn");
    if (mapping.at != nullptr) ::munmap(mapping.at, mapping.bytes);  // a peer could not map it there
    mapping.at = map_at(fd.get(), r.address, r.bytes);
    mapping.bytes = r.bytes;
    w.write(s, Mapped{mapping.at != nullptr}, deadline, "bootstrap: telling the root whether the arena mapped");
  }
}

}  // namespace ccc
