#include "cuda_arena.h"

#include <unistd.h>

#include <bit>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bootstrap.h"
#include "ccc/errors.h"
#include "ccc_abi.h"

namespace ccc {

namespace {

constexpr uint64_t kProgressBytes = sizeof(unsigned long long) * CCC_PROGRESS_WORDS;
constexpr uint64_t kMailboxBytes = sizeof(ccc_buffers) * 2 * CCC_MAX_CHANNELS;

uint64_t round_up(uint64_t bytes, uint64_t to) { return (bytes + to - 1) / to * to; }

CUmemAllocationProp part_properties(int ordinal) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

}  // namespace

const uint64_t CudaSyncLayout::kMailbox = kProgressBytes;
const uint64_t CudaSyncLayout::kError = kProgressBytes + kMailboxBytes;
const uint64_t CudaSyncLayout::kInbox = kProgressBytes + kMailboxBytes + sizeof(unsigned long long);

uint64_t CudaSyncLayout::inbox_bytes(int nranks) {
  return sizeof(unsigned long long) * CCC_MAX_CHANNELS * static_cast<uint64_t>(nranks);
}

uint64_t CudaSyncLayout::bytes(int nranks) { return kInbox + inbox_bytes(nranks); }

CudaArenaLayout cuda_arena_layout(int nranks, uint64_t heap_bytes, uint64_t granularity) {
  if (granularity == 0 || !std::has_single_bit(granularity))
    throw Error(ErrorKind::InvalidArgument,
                fmt::format("allocation granularity {} is not a power of two", granularity));
  CudaArenaLayout l;
  l.sync_bytes = CudaSyncLayout::bytes(nranks);
  l.heap_offset = round_up(l.sync_bytes, ArenaHeap::kAlign);
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max() / 4;
  if (heap_bytes > kMax || static_cast<uint64_t>(nranks) > kMax / (heap_bytes + l.heap_offset + granularity))
    throw Error(ErrorKind::System, fmt::format("a {}-rank arena of {} heap bytes per rank does not fit the address "
                                               "space", nranks, heap_bytes));
  l.part_bytes = round_up(l.heap_offset + heap_bytes, granularity);
  l.heap_bytes = l.part_bytes - l.heap_offset;  // the rounding's slack is heap too
  l.total_bytes = l.part_bytes * static_cast<uint64_t>(nranks);
  l.granularity = granularity;
  return l;
}

int current_cuda_device(const CudaDriver& driver) {
  CUcontext context = nullptr;
  driver.check(driver.cuCtxGetCurrent(&context), "cuCtxGetCurrent");
  if (context == nullptr) return 0;
  CUdevice device = 0;
  driver.check(driver.cuCtxGetDevice(&device), "cuCtxGetDevice");
  for (int ordinal = 0; ordinal < driver.device_count(); ++ordinal) {
    CUdevice d = 0;
    driver.check(driver.cuDeviceGet(&d, ordinal), "cuDeviceGet");
    if (d == device) return ordinal;
  }
  throw Error(ErrorKind::Cuda, "the current context's device is none of the driver's devices");
}

// Imports the peers' parts once (the descriptors close after the bootstrap), then reserves,
// maps and opens the whole range at each address the root proposes.
class CudaArena::Mapper : public ArenaMapper {
 public:
  Mapper(const CudaDriver& driver, const CudaArenaLayout& layout, int rank, int ordinal, CUmemGenericAllocationHandle own)
      : driver_(driver), layout_(layout), rank_(rank), ordinal_(ordinal), own_(own) {}
  ~Mapper() override {
    unmap();
    for (size_t r = 0; r < handles_.size(); ++r)
      if (static_cast<int>(r) != rank_ && handles_[r] != 0) driver_.cuMemRelease(handles_[r]);
    driver_.cuMemRelease(own_);
  }

  bool map_at(uint64_t address, std::span<const int> fds) override {
    if (handles_.empty()) import(fds);
    suggestion_ = 0;
    CUdeviceptr got = 0;
    if (const CUresult r = driver_.cuMemAddressReserve(&got, layout_.total_bytes, layout_.granularity, address, 0);
        r != CUDA_SUCCESS) {
      const char* text = nullptr;
      driver_.cuGetErrorString(r, &text);
      refusal_ = fmt::format("cuMemAddressReserve at {:#x}: {}", address, text != nullptr ? text : "error");
      return false;
    }
    if (got != address) {  // the hint was taken here: the driver chose another range
      driver_.cuMemAddressFree(got, layout_.total_bytes);
      suggestion_ = got;
      refusal_ = fmt::format("cuMemAddressReserve at {:#x}: the range is taken in this process", address);
      return false;
    }
    reserved_ = got;
    try {
      for (size_t r = 0; r < handles_.size(); ++r) {
        driver_.check(driver_.cuMemMap(part(r), layout_.part_bytes, 0, handles_[r], 0), "cuMemMap");
        ++mapped_;
      }
      CUmemAccessDesc access{};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = ordinal_;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      driver_.check(driver_.cuMemSetAccess(reserved_, layout_.total_bytes, &access, 1), "cuMemSetAccess");
      // The rank's own sync state starts at zero, before the root lets any rank launch (fresh
      // physical memory holds anything).
      driver_.check(driver_.cuMemsetD8(part(rank_), 0, layout_.sync_bytes), "cuMemsetD8");
      driver_.check(driver_.cuCtxSynchronize(), "cuCtxSynchronize");
    } catch (...) {
      unmap();
      throw;
    }
    return true;
  }

  void unmap() override {
    for (; mapped_ > 0; --mapped_) driver_.cuMemUnmap(part(mapped_ - 1), layout_.part_bytes);
    if (reserved_ != 0) driver_.cuMemAddressFree(reserved_, layout_.total_bytes);
    reserved_ = 0;
  }

  uint64_t suggestion() const override { return suggestion_; }
  const std::string& refusal() const { return refusal_; }

 private:
  void import(std::span<const int> fds) {
    handles_.assign(fds.size(), 0);
    for (size_t r = 0; r < fds.size(); ++r) {
      if (static_cast<int>(r) == rank_) {
        handles_[r] = own_;
        continue;
      }
      void* os_handle = reinterpret_cast<void*>(static_cast<uintptr_t>(fds[r]));
      driver_.check(driver_.cuMemImportFromShareableHandle(&handles_[r], os_handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                    fmt::format("cuMemImportFromShareableHandle (rank {}'s part)", r).c_str());
    }
  }
  CUdeviceptr part(size_t r) const { return reserved_ + r * layout_.part_bytes; }

  const CudaDriver& driver_;
  CudaArenaLayout layout_;
  int rank_, ordinal_;
  CUmemGenericAllocationHandle own_;
  std::vector<CUmemGenericAllocationHandle> handles_;  // by rank; [rank_] is own_
  CUdeviceptr reserved_ = 0;
  size_t mapped_ = 0;  // parts mapped, from rank 0
  std::string refusal_;  // why the last proposal did not map here
  uint64_t suggestion_ = 0;  // where the driver would have reserved it instead
};

CudaArena::CudaArena(const UniqueId& id, int nranks, int rank, int ordinal, uint64_t heap_bytes, uint64_t timeout_ns)
    : driver_(CudaDriver::get()), nranks_(nranks), rank_(rank), ordinal_(ordinal) {
  if (ordinal < 0 || ordinal >= driver_.device_count())
    throw Error(ErrorKind::InvalidArgument,
                fmt::format("CUDA device {} does not exist ({} present)", ordinal, driver_.device_count()));
  CudaContextGuard guard(driver_);
  driver_.check(driver_.cuDeviceGet(&device_, ordinal), "cuDeviceGet");
  driver_.check(driver_.cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  // Only when the constructor fails: unmap what was mapped while the context is still current
  // and retained (the member mapper_ would otherwise be destroyed after the release, maybe with
  // the context gone), then release it. A built arena keeps the retain.
  struct Release {
    const CudaDriver& driver;
    CUdevice device;
    std::unique_ptr<Mapper>& mapper;
    bool keep = false;
    ~Release() {
      if (keep) return;
      mapper.reset();
      driver.cuDevicePrimaryCtxRelease(device);
    }
  } release{driver_, device_, mapper_};
  driver_.check(driver_.cuCtxSetCurrent(context_), "cuCtxSetCurrent");

  const CUmemAllocationProp prop = part_properties(ordinal);
  size_t granularity = 0;
  driver_.check(driver_.cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                "cuMemGetAllocationGranularity");
  layout_ = cuda_arena_layout(nranks, heap_bytes, granularity);
  CUmemGenericAllocationHandle own = 0;
  driver_.check(driver_.cuMemCreate(&own, layout_.part_bytes, &prop, 0),
                fmt::format("cuMemCreate ({} bytes of rank {}'s part of the arena on device {})", layout_.part_bytes,
                            rank, ordinal).c_str());
  mapper_ = std::make_unique<Mapper>(driver_, layout_, rank, ordinal, own);
  int fd = -1;
  driver_.check(driver_.cuMemExportToShareableHandle(&fd, own, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
                "cuMemExportToShareableHandle");
  struct Close {
    int fd;
    ~Close() { ::close(fd); }  // the peers have their copies once the bootstrap returns
  } close_fd{fd};

  JoinRequest request;
  request.nranks = nranks;
  request.rank = rank;
  request.kind = ArenaKind::Cuda;
  request.part_bytes = layout_.part_bytes;
  request.total_bytes = layout_.total_bytes;
  request.alignment = layout_.granularity;  // as cuMemMap needs
  request.timeout_ns = timeout_ns;
  request.part_fd = fd;
  try {
    base_ = bootstrap_join(id, request, *mapper_, &control_);
  } catch (const Error& e) {
    if (mapper_->refusal().empty()) throw;
    throw Error(e.kind(), fmt::format("{} (here, last: {})", e.what(), mapper_->refusal()));
  } catch (const CudaError& e) {
    throw Error(ErrorKind::Cuda, e.what());
  }
  heap_ = std::make_unique<ArenaHeap>(static_cast<uintptr_t>(sync(rank)) + layout_.heap_offset, layout_.heap_bytes);
  // The ranks' devices, for the topology, and which ranks share this rank's device: their kernels
  // must then all be resident on it at once (docs/runtime.md, "Programmatic dependent launch").
  const std::vector<std::byte> all =
      control_->all_gather(encode_rank_device(probe_rank_device(driver_, ordinal)), "the ranks' devices");
  for (int r = 0; r < nranks; ++r)
    devices_.push_back(decode_rank_device(
        std::span<const std::byte, kRankDeviceBytes>(all.data() + static_cast<size_t>(r) * kRankDeviceBytes, kRankDeviceBytes)));
  for (int r = 0; r < nranks; ++r)
    device_shared_ = device_shared_ || (r != rank && devices_[r].device.pci_bus_id == devices_[rank].device.pci_bus_id);
  release.keep = true;
}

CudaArena::~CudaArena() {
  CUcontext saved = nullptr;
  driver_.cuCtxGetCurrent(&saved);
  driver_.cuCtxSetCurrent(context_);  // unmapping needs the device's context; the caller may have none
  // cuMemUnmap must not run while work on the device still uses the range. The communicator
  // destroys its CudaRanks (which synchronises) before the arena, but the arena does not lean on
  // that member order.
  driver_.cuCtxSynchronize();
  mapper_.reset();
  driver_.cuCtxSetCurrent(saved);
  driver_.cuDevicePrimaryCtxRelease(device_);
}

bool CudaArena::contains(const void* p, uint64_t bytes) const {
  const auto at = reinterpret_cast<uintptr_t>(p);
  return at >= base_ && at - base_ <= layout_.total_bytes && bytes <= layout_.total_bytes - (at - base_);
}

}  // namespace ccc
