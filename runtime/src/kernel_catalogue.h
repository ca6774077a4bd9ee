// A communicator's kernels: for each call shape, the schedule and parameters the selection picks
// (the cost model on the communicator's topology, else a default), generated, compiled through
// the JIT cache and loaded on the backend once, and warm-ups that compile ahead of the calls.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend.h"
#include "buffer_placement.h"
#include "ccc/communicator.h"
#include "emit_cuda.h"
#include "kernel_source.h"
#include "schedule_menu.h"
#include "topology.h"

namespace ccc {

class KernelCatalogue {
 public:
  // What selection picked for one call shape.
  using Choice = KernelChoice;
  struct Loaded {
    EmittedKernel kernel;
    int handle = -1;  // Backend::load's
  };
  // A kernel ready to launch for one call shape, and what its launch needs.
  struct Prepared {
    const Loaded* loaded = nullptr;
    LaunchNeeds needs;
  };

  // `options`, `backend` and `topology` (null: no cost model) outlive this. `traced`: kernels are
  // compiled with their trace hooks on.
  KernelCatalogue(const CommOptions& options, Backend& backend, const Topology* topology, bool traced)
      : options_(options), backend_(backend), topology_(topology), traced_(traced) {}

  // The selection for `call`'s shape (made once per shape).
  const Choice& choose(const CollectiveCall& call);
  // The loaded kernel for `call` (generated, compiled and loaded the first time).
  Prepared prepare(const CollectiveCall& call, bool in_place);
  // A kernel to build before `call` can be prepared without building: generated here, built by
  // build() with no lock held, taken by add().
  struct Missing {
    std::string key;
    EmittedKernel kernel;
    std::string source;
  };
  std::optional<Missing> missing(const CollectiveCall& call, bool in_place);
  // Backend::build for `m`; touches nothing of the catalogue's (any thread, no lock).
  std::unique_ptr<Backend::BuiltKernel> build(const Missing& m) const;
  // Takes `built` in, unless another thread's build of the same kernel came first.
  void add(Missing m, std::unique_ptr<Backend::BuiltKernel> built);
  // One grid (Backend::one_grid): where the kernel chosen has more blocks than the grid holds
  // (the driver's occupancy for that kernel: its registers and threads, not a constant), as many
  // channels as fit, unless the caller fixed them; launch_all refuses what cannot fit even with
  // one channel per rank.
  Prepared fit_grid(const CollectiveCall& call, bool in_place, const Prepared& p);
  // Compiles the kernels of `shapes` into the cache on a thread (WarmUp::Background), or returns
  // the compiles for the caller to run (WarmUp::Wait; they touch nothing of the catalogue's).
  std::vector<std::function<void()>> warm_up(const std::vector<CollectiveCall>& shapes, bool in_place,
                                             Communicator::WarmUp mode);

 private:
  void select_for(const CollectiveCall& call, int64_t bytes, int channels, Choice& choice);
  JitCache& cache() const;
  const ScheduleMenu& menu_for(Collective collective, int root);
  KernelShape kernel_shape(const CollectiveCall& call, bool in_place);
  EmittedKernel generate(const CollectiveCall& call, const Choice& choice, const KernelShape& shape) const;
  // What is compiled for `kernel`: its source, with the tracing switch on when tracing.
  std::string launch_source(const EmittedKernel& kernel) const;

  const CommOptions& options_;
  Backend& backend_;
  const Topology* topology_;
  const bool traced_;  // fixed for the communicator's life, so kernel keys need not name it
  std::map<std::pair<Collective, int>, std::unique_ptr<ScheduleMenu>> menus_;  // by collective, root
  std::map<std::string, Choice> choices_;  // by call shape
  std::map<std::string, Loaded> kernels_;  // by schedule and kernel shape
  // Background warm-ups: compile into the cache only. Last, so they are joined before anything
  // else here goes away.
  std::vector<std::jthread> warmers_;
};

}  // namespace ccc
