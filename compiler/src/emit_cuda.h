// Emission: kernel plan -> CUDA C++ source that also compiles as host C++ (device/ccc_device.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ccc/diagnostics.h"
#include "kernel_plan.h"

namespace ccc {

struct EmittedKernel {
  std::string source;       // includes "ccc_device.h" and nothing else
  std::string kernel_name;  // extern "C" symbol: ccc_<schedule>_n<N>[_root<R>]_<dtype>_<op>_t<tile>_c<channels>_p<depth>[_ip]
  int channels = 0;         // blocks per rank (grid = channels, or N * channels for virtual ranks)
  std::string schedule;     // the schedule's name, as its source declares it
  int64_t tile_bytes = 0;   // KernelOptions::tile_bytes
  int pipeline = 0;         // KernelOptions::pipeline
  int block_threads = 0;    // CUDA threads per block (host: CommOptions::host_block_threads)
  int64_t scratch_blocks = 0;  // blocks of count elements of scratch: the schedule's, then staging
  int64_t scratch_slots = 0;   // `scratch K slots`: K slots (slot_elements each) before the staging
  int64_t chunks_per_block = 1;
  int blocks = 1;              // KernelPlan::blocks
  int dtype_bytes = 0;
  Protocol protocol = Protocol::Simple;
  int ll_slots = 0;            // protocol ll: receive regions per rank (ccc_buffers::ll)
  int64_t ll_blocks = 0;       // protocol ll: blocks of count elements each region spans
  // Each step's label (KernelPlan::steps: "reduce_scatter s=2"), shared: traces name steps by it.
  std::shared_ptr<const std::vector<std::string>> step_labels;

  // Scratch each rank must provide for a collective of `count` elements (the kernel's `count`).
  uint64_t scratch_bytes(uint64_t count) const {
    const uint64_t elements = static_cast<uint64_t>(scratch_slots) * slot_elements(count) +
                              static_cast<uint64_t>(scratch_blocks) * count;
    return elements * static_cast<uint64_t>(dtype_bytes);
  }
  // Elements of one scratch slot: the largest chunk (a block's last: the 64-byte cuts' leftovers
  // go to the last chunks) rounded up to 64 bytes, as ChannelGeometry::slot_stride has it.
  uint64_t slot_elements(uint64_t count) const {
    const uint64_t unit = 64 / static_cast<uint64_t>(dtype_bytes), n = static_cast<uint64_t>(chunks_per_block);
    const uint64_t units = count / unit, q = units / n, r = units % n;
    const uint64_t last_begin = unit * ((n - 1) * q + (r > 0 ? r - 1 : 0));
    return (count - last_begin + unit - 1) / unit * unit;
  }
  // Protocol ll: the receive slots (ccc_buffers::ll) each rank must provide: `ll_slots` regions,
  // each one line of 8 bytes per 4 bytes of each of `ll_blocks` blocks (ccc_protocol_ll.h,
  // ll_lines).
  uint64_t ll_bytes(uint64_t count) const {
    const uint64_t lines = static_cast<uint64_t>(ll_blocks) * ((count * static_cast<uint64_t>(dtype_bytes) + 3) / 4);
    return static_cast<uint64_t>(ll_slots) * lines * 8;
  }
  // The bytes of the collective's vector (what kLlMaxBytes caps).
  uint64_t vector_bytes(uint64_t count) const {
    return static_cast<uint64_t>(blocks) * count * static_cast<uint64_t>(dtype_bytes);
  }
};

// `source`, when given, is the schedule text: each step's comment then quotes its DSL line.
EmittedKernel emit_cuda(const KernelPlan& plan, const SourceFile* source = nullptr);

}  // namespace ccc
