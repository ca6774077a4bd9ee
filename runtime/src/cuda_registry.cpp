#include "cuda_registry.h"

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>

#include <fmt/format.h>

#include "bootstrap.h"
#include "ccc/errors.h"
#include "cuda_arena.h"

namespace ccc {

// What each rank contributes to an exchange: its outcome so far, and which registration or
// how many allocations (Shared) follow.
struct CudaRegistry::Wire {
  uint32_t ok;
  uint32_t error_kind;  // not ok: an ErrorKind
  uint64_t serial;      // remove: the registration's add call
  uint64_t count;       // add: the allocations this rank shares (the next exchange's entries)
  char error[256];      // not ok: why
};

// One allocation a rank shares: where it lies in its owner's process, and its CUDA IPC handle.
struct CudaRegistry::Shared {
  uint64_t base;
  uint64_t bytes;  // 0: padding (ranks that share fewer allocations than others)
  CUipcMemHandle handle;
};

namespace {

CudaRegistry::Wire failed(const Error& e) {
  CudaRegistry::Wire w{};
  w.error_kind = static_cast<uint32_t>(e.kind());
  std::snprintf(w.error, sizeof w.error, "%s", e.what());
  return w;
}

// Runs `body`, which fills `w`; a failure fills w with why instead (the rank still takes part in
// the exchange, so that its peers fail too instead of waiting).
template <typename Body>
void outcome(CudaRegistry::Wire& w, Body&& body) {
  try {
    body();
    w.ok = 1;
  } catch (const Error& e) {
    w = failed(e);
  } catch (const CudaError& e) {
    w = failed(Error(ErrorKind::Cuda, e.what()));
  } catch (const std::exception& e) {  // still takes part, so that its peers do not wait
    w = failed(Error(ErrorKind::Internal, e.what()));
  }
}

// The first failure among `all`: this rank's own as it was, a peer's as InvalidUsage naming it.
void throw_first_failure(const std::vector<CudaRegistry::Wire>& all, int me, const char* what) {
  if (all[me].ok == 0) throw Error(static_cast<ErrorKind>(all[me].error_kind), all[me].error);
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].ok == 0)
      throw Error(ErrorKind::InvalidUsage, fmt::format("{}: rank {}'s call failed, so every rank's did: {}", what, r,
                                                       all[r].error));
}

}  // namespace

CudaRegistry::CudaRegistry(const CudaDriver& driver, CudaArena& arena) : driver_(driver), arena_(arena) {
  // Both tables within one 4 GiB-aligned range (device()); an allocation that straddles a
  // boundary is kept aside until one that does not is found.
  constexpr uint64_t kBytes = 2 * sizeof(ccc_registry);
  std::vector<CUdeviceptr> straddling;
  for (int tries = 0; tries < 4 && tables_ == 0; ++tries) {
    CUdeviceptr p = 0;
    driver_.check(driver_.cuMemAlloc(&p, kBytes), "cuMemAlloc (the registry)");
    if ((p >> 32) == ((p + kBytes - 1) >> 32)) tables_ = p;
    else straddling.push_back(p);
  }
  for (CUdeviceptr p : straddling) driver_.cuMemFree(p);
  if (tables_ == 0) throw Error(ErrorKind::System, "the registry: no allocation within one 4 GiB range");
  active_ = 1;  // so that the first write fills table 0, the one device() then gives
  try {
    write_registry();
  } catch (...) {
    driver_.cuMemFree(tables_);
    throw;
  }
}

CudaRegistry::~CudaRegistry() {
  // Best effort: a failing driver at teardown has nothing left to report to.
  for (const auto& [key, o] : opened_) driver_.cuIpcCloseMemHandle(o.local);
  driver_.cuMemFree(tables_);
}

std::vector<CudaRegistry::Wire> CudaRegistry::exchange(const Wire& mine, const std::string& what) {
  const std::vector<std::byte> bytes =
      arena_.control().all_gather(std::as_bytes(std::span<const Wire>(&mine, 1)), what);
  std::vector<Wire> all(bytes.size() / sizeof(Wire));
  std::memcpy(all.data(), bytes.data(), all.size() * sizeof(Wire));
  return all;
}

// Waits for the rank's launches (none may read the registry while it changes, nor a peer's
// buffer after it is deregistered). Synchronising a context while one of its streams captures
// is prohibited (CUDA Programming Guide, stream capture, "Prohibited and Unhandled
// Operations"): the driver's refusal says a capture is under way.
void CudaRegistry::synchronize_outside_capture(const char* what) {
  const CUresult r = driver_.cuCtxSynchronize();
  if (r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT ||
      r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED)
    throw Error(ErrorKind::InvalidUsage, fmt::format("{}: not allowed while a stream of the rank's device captures a "
                                                     "graph; register buffers before capturing, deregister after",
                                                     what));
  driver_.check(r, "cuCtxSynchronize");
}

void* CudaRegistry::add(void* p, uint64_t bytes) {
  const Buffer buffer{reinterpret_cast<uintptr_t>(p), bytes};
  return add_buffers(std::span(&buffer, 1), "cccCommRegister");
}

// The allocation holding `b`, for the peers to open; nullopt for arena memory (shared already).
std::optional<CudaRegistry::Shared> CudaRegistry::shareable(const Buffer& b, const char* what) const {
  const auto ptr = static_cast<CUdeviceptr>(b.base);
  const void* p = reinterpret_cast<const void*>(b.base);
  int ordinal = -1;
  if (driver_.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) != CUDA_SUCCESS)
    throw Error(ErrorKind::InvalidArgument, fmt::format("{}: buffer {} is not CUDA device memory", what, p));
  if (ordinal != arena_.ordinal())
    throw Error(ErrorKind::InvalidArgument, fmt::format("{}: buffer {} is on CUDA device {}, the rank's device is {}",
                                                        what, p, ordinal, arena_.ordinal()));
  if (arena_.contains(p, b.bytes)) return std::nullopt;
  CUdeviceptr base = 0;
  size_t size = 0;
  driver_.check(driver_.cuMemGetAddressRange(&base, &size, ptr), "cuMemGetAddressRange");
  if (ptr - base > size || b.bytes > size - (ptr - base))
    throw Error(ErrorKind::InvalidArgument, fmt::format("{}: its {} bytes run past the end of the allocation that "
                                                        "holds it ({} bytes from {:#x})", what, b.bytes, size, base));
  int legacy_ipc = 0;
  driver_.check(driver_.cuPointerGetAttribute(&legacy_ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr),
                "cuPointerGetAttribute");
  // cuIpcGetMemHandle shares cuMemAlloc/cudaMalloc allocations only (CUDA Driver API, cuIpcGetMemHandle).
  if (legacy_ipc == 0)
    throw Error(ErrorKind::InvalidArgument,
                fmt::format("{}: buffer {} comes from a stream-ordered pool (cudaMallocAsync) or from cuMemCreate, "
                            "which CUDA IPC cannot share; allocate it with cudaMalloc, or with cccCommMemAlloc (used "
                            "in place without registering)", what, p));
  Shared shared{base, size, {}};
  driver_.check(driver_.cuIpcGetMemHandle(&shared.handle, base), "cuIpcGetMemHandle");
  return shared;
}

void* CudaRegistry::add_buffers(std::span<const Buffer> buffers, const char* what,
                                const std::function<void()>& precondition) {
  const int me = arena_.rank();
  const uint64_t serial = serial_++;  // every rank counts every call, failed or not
  Wire mine{};
  std::vector<Shared> shared;  // one per allocation, however many of the buffers it holds
  outcome(mine, [&] {
    if (precondition) precondition();
    for (const Buffer& b : buffers) {
      if (b.base == 0) throw Error(ErrorKind::InvalidArgument, fmt::format("{}: buff is null", what));
      if (b.bytes == 0) throw Error(ErrorKind::InvalidArgument, fmt::format("{}: size is 0", what));
    }
    synchronize_outside_capture(what);
    for (const Buffer& b : buffers) {
      const std::optional<Shared> s = shareable(b, what);
      if (s && std::ranges::none_of(shared, [&](const Shared& o) { return o.base == s->base; })) shared.push_back(*s);
    }
    mine.count = shared.size();
  });
  mine.serial = serial;
  const std::vector<Wire> all = exchange(mine, what);
  throw_first_failure(all, me, what);

  // Every rank's allocations, padded to the longest list (an exchange's parts are of one size);
  // none anywhere (every rank knows it from the counts): no exchange.
  uint64_t most = 0;
  for (const Wire& w : all) most = std::max(most, w.count);
  std::vector<Shared> table;
  if (most > 0) {
    shared.resize(most, Shared{});
    const std::vector<std::byte> gathered = arena_.control().all_gather(
        std::as_bytes(std::span<const Shared>(shared)), fmt::format("{} (allocations)", what));
    table.resize(gathered.size() / sizeof(Shared));
    std::memcpy(table.data(), gathered.data(), table.size() * sizeof(Shared));
  }

  // Open what this process has not yet (one reference per registration either way).
  std::vector<Key> keys;
  Wire opened{};
  outcome(opened, [&] {
    for (int r = 0; r < static_cast<int>(all.size()); ++r) {
      if (r == me) continue;
      for (uint64_t i = 0; i < most; ++i) {
        const Shared& s = table[r * most + i];
        if (s.bytes == 0) continue;
        keys.push_back(open(r, s, what));
      }
    }
    write_registry();
  });
  // Whether every rank opened everything: if one did not, all undo, so the ranks agree.
  try {
    throw_first_failure(exchange(opened, fmt::format("{} (outcome)", what)), me, what);
  } catch (...) {
    release(keys);
    write_registry();
    throw;
  }
  auto registration = std::make_unique<Registration>(Registration{serial, {buffers.begin(), buffers.end()}, keys});
  void* handle = registration.get();
  registrations_.emplace(handle, std::move(registration));
  return handle;
}

// Takes a reference on rank r's allocation `s`, opening it unless this process has already.
CudaRegistry::Key CudaRegistry::open(int r, const Shared& s, const char* what) {
  const Key key{r, s.base};
  if (auto it = opened_.find(key); it != opened_.end()) {
    // The same base with another handle or size: the owner freed the allocation this rank still
    // maps and a new one took its address. Reusing the old mapping would read freed memory (CUDA
    // Driver API, cuIpcOpenMemHandle: freeing before every importer closed it is undefined
    // behaviour).
    if (it->second.bytes != s.bytes || std::memcmp(&it->second.handle, &s.handle, sizeof(CUipcMemHandle)) != 0)
      throw Error(ErrorKind::InvalidUsage,
                  fmt::format("{}: rank {}'s allocation at {:#x} is not the one it registered there before (freed "
                              "and reallocated while still registered?); deregister before freeing a buffer",
                              what, r, s.base));
    ++it->second.refs;
    return key;
  }
  if (opened_.size() >= CCC_MAX_REGISTRATIONS)
    throw Error(ErrorKind::InvalidUsage, fmt::format("{}: this rank has opened {} peer allocations, the most its "
                                                     "registry holds; deregister some first", what,
                                                     CCC_MAX_REGISTRATIONS));
  CUdeviceptr local = 0;
  driver_.check(driver_.cuIpcOpenMemHandle(&local, s.handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
                fmt::format("cuIpcOpenMemHandle (rank {}'s buffer)", r).c_str());
  opened_[key] = {s.bytes, local, 1, s.handle};
  return key;
}

void CudaRegistry::remove(void* handle) {
  constexpr const char* kWhat = "cccCommDeregister";
  const int me = arena_.rank();
  const auto it = registrations_.find(handle);
  Wire mine{};
  outcome(mine, [&] {
    if (it == registrations_.end())
      throw Error(ErrorKind::InvalidArgument, fmt::format("cccCommDeregister: {} is not a handle cccCommRegister gave "
                                                          "on this communicator (or it was deregistered already)",
                                                          handle));
    synchronize_outside_capture(kWhat);
    mine.serial = it->second->serial;
  });
  const std::vector<Wire> all = exchange(mine, kWhat);
  throw_first_failure(all, me, kWhat);
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].serial != mine.serial)
      throw Error(ErrorKind::InvalidUsage, fmt::format("cccCommDeregister: rank {} deregisters the buffer of its "
                                                       "registration #{}, rank {} that of #{}: every rank must "
                                                       "deregister the buffers of one cccCommRegister call together",
                                                       r, all[r].serial, me, mine.serial));
  // Every rank synchronised before the exchange completed: no launch reads these any more.
  release(it->second->peers);
  registrations_.erase(it);
  write_registry();
  // No rank returns before every peer has closed its mapping of the rank's buffer: the owner
  // may free it once this returns, and freeing before an importer closed it is undefined
  // behaviour (CUDA Driver API, cuIpcOpenMemHandle).
  Wire closed{};
  closed.ok = 1;
  closed.serial = mine.serial;
  throw_first_failure(exchange(closed, "cccCommDeregister (closed)"), me, kWhat);
}

bool CudaRegistry::covers(const void* p, uint64_t bytes) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  for (const auto& [handle, r] : registrations_)
    for (const Buffer& b : r->buffers)
      if (at >= b.base && at - b.base <= b.bytes && bytes <= b.bytes - (at - b.base)) return true;
  return false;
}

void CudaRegistry::release(const std::vector<Key>& keys) {
  for (const Key& key : keys) {
    auto it = opened_.find(key);
    if (it == opened_.end() || --it->second.refs > 0) continue;
    driver_.cuIpcCloseMemHandle(it->second.local);  // best effort: the entry goes either way
    opened_.erase(it);
  }
}

void CudaRegistry::write_registry() {
  std::vector<ccc_registration> entries;
  for (const auto& [key, o] : opened_) entries.push_back({key.owner_base, o.bytes, o.local, key.owner, 0});
  ccc_registry header{};
  header.shared_base = arena_.base();
  header.shared_bytes = arena_.layout().total_bytes;
  header.count = static_cast<unsigned>(entries.size());
  // Into the table no launch was given since the last change (device()); it becomes the one.
  const CUdeviceptr table = tables_ + (1 - active_) * sizeof(ccc_registry);
  if (!entries.empty())
    driver_.check(driver_.cuMemcpyHtoD(table + offsetof(ccc_registry, entries), entries.data(),
                                       entries.size() * sizeof(ccc_registration)),
                  "cuMemcpyHtoD (registry entries)");
  driver_.check(driver_.cuMemcpyHtoD(table, &header, offsetof(ccc_registry, entries)), "cuMemcpyHtoD (registry)");
  // From pageable memory a copy may return before it lands; the next launch may be on a
  // non-blocking stream that does not wait for it.
  driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
  active_ = 1 - active_;
}

}  // namespace ccc
