#include "kernel_catalogue.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <set>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "ccc/errors.h"
#include "content_hash.h"
#include "debug_log.h"
#include "select.h"
#include "shipped_schedules.h"
#include "trace.h"

namespace ccc {
namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorKind::InvalidArgument, message); }

// Without a topology to model: the collective's bandwidth-optimal schedule, its ring (the first
// shipped one whose name starts with "ring") or for alltoall the direct exchange, else its first
// shipped schedule.
std::string default_schedule(Collective collective) {
  std::string first;
  for (const ShippedSchedule& s : shipped_schedules()) {
    if (s.collective != collective) continue;
    if (s.name.rfind("ring", 0) == 0 || s.name == "alltoall_direct") return s.name;
    if (first.empty()) first = s.name;
  }
  if (first.empty()) invalid(fmt::format("no shipped schedule implements {}", collective_name(collective)));
  return first;
}

// What the model prices a fused call by (EpilogueShape): its epilogue, rows and outputs.
EpilogueShape epilogue_shape(const CollectiveCall& call, int max_rank_blocks) {
  EpilogueShape e;
  e.max_rank_blocks = max_rank_blocks;  // as Communicator's rank_launch adds them
  e.kind = call.epilogue;
  e.elem_size = static_cast<int>(data_type_size(call.dtype));
  if (call.epilogue != Epilogue::ResidualRmsNorm) return e;
  e.row_bytes = static_cast<int64_t>(call.hidden) * e.elem_size;
  e.residual_out = std::any_of(call.residual_out.begin(), call.residual_out.end(), [](void* p) { return p != nullptr; });
  e.quant_out = call.quant_scale.has_value();
  return e;
}

std::string choice_key(const CollectiveCall& call) {
  const EpilogueShape e = epilogue_shape(call, 0);  // one catalogue per backend
  return fmt::format("{}/{}/{}/{}/{}/{}/{}/{}", collective_name(call.collective), call.count,
                     data_type_name(call.dtype), call.root, epilogue_name(e.kind), e.row_bytes, e.residual_out,
                     e.quant_out);
}

std::string kernel_key(const KernelCatalogue::Choice& choice, const KernelShape& shape) {
  return fmt::format("{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}/{}", choice.algorithm, collective_name(shape.collective),
                     shape.nranks, shape.root, data_type_name(shape.dtype), reduce_op_name(shape.op), shape.channels,
                     shape.tile_bytes, shape.in_place, protocol_name(shape.protocol), shape.one_device,
                     epilogue_name(shape.epilogue));
}

}  // namespace

JitCache& KernelCatalogue::cache() const { return options_.cache ? *options_.cache : JitCache::process_cache(); }

const ScheduleMenu& KernelCatalogue::menu_for(Collective collective, int root) {
  std::unique_ptr<ScheduleMenu>& menu = menus_[{collective, root}];
  if (!menu) {
    std::vector<SourceFile> files;
    for (const ShippedSchedule& s : shipped_schedules()) files.push_back(s.file);
    menu = std::make_unique<ScheduleMenu>(collective, backend_.nranks(), files, std::max(root, 0));
  }
  return *menu;
}

// The schedule and parameters of `choice` that the options leave open: CCC_ALGO, then the model
// over the topology, else the collective's default.
void KernelCatalogue::select_for(const CollectiveCall& call, int64_t bytes, int channels, Choice& choice) {
  const char* env = std::getenv("CCC_ALGO");
  if (choice.algorithm.empty() && env != nullptr) choice.algorithm = env;
  if (topology_ == nullptr) {
    if (choice.algorithm.empty()) choice.algorithm = default_schedule(call.collective);
  } else {
    SelectOptions select;
    select.algo = options_.algo;  // select_schedule reads CCC_ALGO itself
    if (channels > 0) select.channels = {channels};
    if (options_.tile_bytes > 0) select.tiles = {options_.tile_bytes};
    if (options_.protocol) select.protocols = {*options_.protocol};
    select.epilogue = epilogue_shape(call, backend_.max_rank_blocks());
    try {
      const ccc::Choice best = select_schedule(call.collective, bytes, static_cast<int>(data_type_size(call.dtype)),
                                               *topology_, menu_for(call.collective, call.root).candidates(), select);
      choice = {best.name(), best.params.channels, best.params.tile_bytes, best.params.protocol};
      predictions_[choice_key(call)] = best.estimate.time;
    } catch (const std::invalid_argument& e) {
      invalid(fmt::format("{}: no schedule fits: {}", collective_name(call.collective), e.what()));
    }
  }
}

const KernelCatalogue::Choice& KernelCatalogue::choose(const CollectiveCall& call) {
  const std::string key = choice_key(call);
  if (auto it = choices_.find(key); it != choices_.end()) return it->second;
  const int channels = options_.channels > 0 ? options_.channels : backend_.default_channels();
  Choice choice{options_.algo, channels, options_.tile_bytes, options_.protocol.value_or(Protocol::Simple)};
  const int n = backend_.nranks();
  const auto bytes = static_cast<int64_t>(std::max(send_bytes(call, n), recv_bytes(call, n)));
  if (choice.protocol == Protocol::Ll && bytes > kLlMaxBytes)
    invalid(fmt::format("{} of {} bytes: protocol ll moves at most {} bytes per call (its receive slots are sized "
                        "for that); use protocol simple",
                        collective_name(call.collective), bytes, kLlMaxBytes));
  if (!options_.schedule) select_for(call, bytes, channels, choice);  // else the given one
  if (debug_info_on()) {
    auto or_default = [](int64_t v, const char* unit, const char* what) {
      return v > 0 ? fmt::format("{}{} {}", v, unit, what) : fmt::format("default {}", what);
    };
    debug_info(fmt::format("{} of {} B {}, root {}: {}, protocol {}, {}, {}", collective_name(call.collective), bytes,
                           data_type_name(call.dtype), call.root, options_.schedule ? "the given schedule" : choice.algorithm,
                           protocol_name(choice.protocol), or_default(choice.channels, "", "channels"),
                           or_default(choice.tile_bytes, " B", "tiles")));
  }
  return choices_.emplace(key, choice).first->second;
}

double KernelCatalogue::predicted_seconds(const CollectiveCall& call) {
  choose(call);
  const auto it = predictions_.find(choice_key(call));
  return it != predictions_.end() ? it->second : 0;
}

KernelShape KernelCatalogue::kernel_shape(const CollectiveCall& call, bool in_place) {
  const Choice& choice = choose(call);
  KernelShape shape;
  shape.collective = call.collective;
  shape.nranks = backend_.nranks();
  shape.root = call.root;
  shape.dtype = call.dtype;
  shape.op = call.op;
  shape.channels = choice.channels;
  shape.tile_bytes = choice.tile_bytes;
  shape.in_place = in_place;
  shape.protocol = choice.protocol;
  shape.one_device = backend_.one_device();
  shape.epilogue = call.epilogue;
  return shape;
}

EmittedKernel KernelCatalogue::generate(const CollectiveCall& call, const Choice& choice,
                                        const KernelShape& shape) const {
  EmittedKernel kernel = generate_kernel(
      options_.schedule ? *options_.schedule : find_shipped_schedule(call.collective, choice.algorithm).file, shape,
      options_.defines);
  if (kernel.channels > Communicator::kMaxChannels)
    invalid(fmt::format("{} channels requested; at most {}", kernel.channels, Communicator::kMaxChannels));
  return kernel;
}

std::string KernelCatalogue::launch_source(const EmittedKernel& kernel) const {
  return traced_ ? traced_kernel_source(kernel.source) : kernel.source;
}

std::optional<std::string> KernelCatalogue::missing(const CollectiveCall& call, bool in_place) {
  std::string key = kernel_key(choose(call), kernel_shape(call, in_place));
  if (kernels_.count(key)) return std::nullopt;
  return key;
}

KernelCatalogue::Missing KernelCatalogue::to_build(const CollectiveCall& call, bool in_place, std::string key) {
  EmittedKernel kernel = generate(call, choose(call), kernel_shape(call, in_place));
  std::string source = launch_source(kernel);
  return Missing{std::move(key), std::move(kernel), std::move(source)};
}

std::unique_ptr<Backend::BuiltKernel> KernelCatalogue::build(const Missing& m) const {
  return backend_.build(cache(), m.source, m.kernel);
}

void KernelCatalogue::add(Missing m, std::unique_ptr<Backend::BuiltKernel> built) {
  if (kernels_.count(m.key)) return;  // prepare() built it meanwhile (fit_grid): `built` unloads
  Loaded loaded;
  loaded.kernel = std::move(m.kernel);
  loaded.handle = backend_.install(std::move(built));
  kernels_.emplace(std::move(m.key), std::move(loaded));
}

KernelCatalogue::Prepared KernelCatalogue::prepare(const CollectiveCall& call, bool in_place) {
  if (std::optional<std::string> key = missing(call, in_place)) {
    Missing m = to_build(call, in_place, std::move(*key));
    std::unique_ptr<Backend::BuiltKernel> built = build(m);
    add(std::move(m), std::move(built));
  }
  const std::string key = kernel_key(choose(call), kernel_shape(call, in_place));
  const auto it = kernels_.find(key);
  Prepared p;
  p.loaded = &it->second;
  p.needs.in_place = in_place;
  p.needs.scratch_bytes = p.loaded->kernel.scratch_bytes(call.count);
  p.needs.ll_bytes = p.loaded->kernel.ll_bytes(call.count);
  // Equal on every rank that issues the same collective; never 0 (the prelude's "not loaded").
  p.needs.signature = checksum64(fmt::format("{}/{}", key, call.count)) | 1;
  return p;
}

KernelCatalogue::Prepared KernelCatalogue::fit_grid(const CollectiveCall& call, bool in_place, const Prepared& p) {
  const int n = backend_.nranks();
  const EmittedKernel& k = p.loaded->kernel;
  const int64_t fit = backend_.grid_blocks(p.loaded->handle, k.block_threads) / n;
  if (options_.channels > 0 || k.channels <= fit || fit < 1) return p;
  choose(call);  // the entry this call's shape selected
  choices_.at(choice_key(call)).channels = static_cast<int>(std::min<int64_t>(fit, k.channels - 1));
  return prepare(call, in_place);
}

std::vector<std::function<void()>> KernelCatalogue::warm_up(const std::vector<CollectiveCall>& shapes, bool in_place,
                                                            Communicator::WarmUp mode) {
  std::vector<std::function<void()>> tasks;
  std::set<std::string> keys;
  const int n = backend_.nranks();
  for (const CollectiveCall& call : shapes) {
    validate_shape(call, n);
    if (call.count == 0) continue;  // such a call moves nothing and runs no kernel
    const Choice choice = choose(call);
    const KernelShape shape = kernel_shape(call, in_place);
    const std::string key = kernel_key(choice, shape);
    if (kernels_.count(key) || !keys.insert(key).second) continue;  // loaded already, or listed
    const EmittedKernel kernel = generate(call, choice, shape);
    tasks.push_back(backend_.compile_task(cache(), launch_source(kernel), kernel));
  }
  if (tasks.empty() || mode == Communicator::WarmUp::Wait) return tasks;
  try {
    warmers_.emplace_back([tasks = std::move(tasks)] {
      for (const auto& task : tasks) {
        try {
          task();
        } catch (const std::exception&) {
          // Left to the call that needs this kernel: it compiles it again and reports why.
        }
      }
    });
  } catch (const std::system_error& e) {
    throw Error(ErrorKind::System, fmt::format("cannot start the warm-up thread: {}", e.what()));
  }
  return {};
}

}  // namespace ccc
