// ccc._ccc: the nanobind extension behind the `ccc` Python package (python/ccc/__init__.py holds
// the documented API; this module is its thin, typed bridge to the C++ library).
//
// Errors cross as Python exceptions of the hierarchy in python/ccc/_errors.py: ccc::Error by its
// kind, schedule diagnostics as DiagnosticError with the location and the rendered caret text.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "call_gate.h"
#include "ccc/communicator.h"
#include "nvrtc_library.h"
#include "pipeline.h"
#include "topology.h"
#include "emit_targets.h"
#include "suggest.h"

namespace nb = nanobind;

namespace {

// A schedule the compiler rejected: the first error's location and every diagnostic rendered.
struct ScheduleDiagnostics {
  std::string file;
  int line = 0;
  int column = 0;
  std::string message;
  std::string rendered;
};

[[noreturn]] void throw_diagnostics(const ccc::Diagnostics& diags, const ccc::SourceFile* file) {
  ScheduleDiagnostics d;
  d.file = file ? file->name : "";
  for (const ccc::Diagnostic& x : diags.all()) {
    if (x.severity != ccc::Severity::Error) continue;
    d.line = x.loc.line;
    d.column = x.loc.col;
    d.message = x.message;
    break;
  }
  d.rendered = diags.render(file);
  throw d;
}

// The schedule as given from Python: text under a name, or (text empty) a path to read.
ccc::SourceFile load_source(const std::string& name, const std::optional<std::string>& text) {
  if (text) return ccc::SourceFile{name, *text};
  ccc::Diagnostics diags;
  std::optional<ccc::SourceFile> file = ccc::read_source(name, diags);
  if (!file) throw_diagnostics(diags, nullptr);
  return *file;
}

// The front end and the analysis, as `ccc check` runs them; the front end's program is kept.
// Through lowering with the default kernel options, as `ccc check`: what check accepts, compile
// emits (an allreduce whose ranks would end with different bits is refused here too).
ccc::CodegenResult analysed(const ccc::SourceFile& file, int nranks, int root, bool in_place) {
  ccc::CodegenOptions options;
  options.instantiate = {.nranks = nranks, .root = root};
  options.kernel.in_place = in_place;
  options.last = ccc::Pass::Lower;
  options.keep_program = true;
  ccc::Diagnostics diags;
  std::optional<ccc::CodegenResult> result = ccc::run_codegen(file, options, diags);
  if (!result) throw_diagnostics(diags, &file);
  return std::move(*result);
}

std::string upper(std::string_view name) {
  std::string s(name);
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

bool is_rooted(ccc::Collective c) { return c == ccc::Collective::Broadcast || c == ccc::Collective::Reduce; }

// What check() proved: ccc.CheckResult.
struct CheckResult {
  std::string schedule;
  ccc::Collective collective = ccc::Collective::AllReduce;
  int ranks = 0;
  std::vector<int> roots;  // the roots verified (broadcast and reduce); empty otherwise
  int64_t steps = 0;
  int64_t ops = 0;
  int64_t waits = 0;                    // waits the sync planner kept (for the last root checked)
  int64_t cross_rank_dependencies = 0;  // before reduction (last root)
  std::vector<std::string> notes;       // the planner's notes, e.g. staging it inserted
  friend bool operator==(const CheckResult&, const CheckResult&) = default;
};

CheckResult check(const std::string& name, const std::optional<std::string>& text, int nranks,
                  std::optional<int> root, int every_root_up_to, bool in_place) {
  const ccc::SourceFile file = load_source(name, text);
  // Like `ccc check`: a rooted collective is proved for every root unless one is given (a
  // schedule can be right for root 0 and wrong for another), while N is small.
  int roots = 1;
  std::optional<ccc::StepProgram> program;
  std::optional<ccc::PlannedProgram> planned;
  for (int r = 0; r < roots; ++r) {
    ccc::CodegenResult result = analysed(file, nranks, root.value_or(r), in_place);
    program = std::move(result.program);
    planned = std::move(result.planned);
    if (!root && is_rooted(program->collective) && nranks <= every_root_up_to) roots = nranks;
  }
  CheckResult out;
  out.schedule = program->schedule;
  out.collective = program->collective;
  out.ranks = program->nranks;
  if (is_rooted(program->collective))
    for (int r = 0; r < roots; ++r) out.roots.push_back(root.value_or(r));
  out.steps = program->nsteps();
  out.ops = program->num_ops();
  out.waits = planned->sync.waits_kept;
  out.cross_rank_dependencies = planned->sync.cross_rank_edges;
  out.notes = planned->sync.notes;
  return out;
}

std::variant<nb::str, nb::bytes> compile(const std::string& name, const std::optional<std::string>& text, int nranks, int root,
                   const std::string& emit, bool in_place, ccc::DataType dtype, ccc::ReduceOp op,
                   std::optional<int64_t> tile_bytes, std::optional<int> channels, std::optional<int> pipeline,
                   std::optional<ccc::Protocol> protocol, const std::string& arch, bool show_syncs,
                   const std::optional<std::string>& topology) {
  const ccc::EmitTarget* target = ccc::find_emit_target(emit);
  if (!target)
    throw ccc::Error(ccc::ErrorKind::InvalidArgument,
                     fmt::format("unknown emit target '{}'{}; one of: {}", emit, ccc::did_you_mean(emit, ccc::emit_target_names()),
                                 fmt::join(ccc::emit_target_names(), ", ")));
  if (show_syncs && std::string(target->name) != "svg")
    throw ccc::Error(ccc::ErrorKind::InvalidArgument, "show_syncs is for emit='svg'");
  const bool cost = std::string(target->name) == "cost";
  if (cost != topology.has_value())
    throw ccc::Error(ccc::ErrorKind::InvalidArgument,
                     cost ? "emit='cost' needs topology= (a topology file; topologies/ has examples)"
                          : "topology= is for emit='cost'");
  std::optional<ccc::Topology> topo;
  if (topology) {
    std::string errors;
    topo = ccc::load_topology(*topology, errors);
    if (!topo) throw ccc::Error(ccc::ErrorKind::InvalidArgument, errors);
  }
  ccc::SelectOptions cost_grid;  // given options pin the search, as on the command line
  if (channels) cost_grid.channels = {*channels};
  if (tile_bytes) cost_grid.tiles = {*tile_bytes};
  ccc::KernelOptions kernel;
  kernel.in_place = in_place;
  kernel.dtype = dtype;
  kernel.op = op;
  if (tile_bytes) kernel.tile_bytes = *tile_bytes;
  if (channels) kernel.channels = *channels;
  if (pipeline) kernel.pipeline = *pipeline;
  if (protocol) {
    kernel.protocol = *protocol;
    cost_grid.protocols = {*protocol};
  }
  cost_grid.pipeline = kernel.pipeline;
  if (kernel.tile_bytes <= 0 || kernel.tile_bytes % 64 != 0)
    throw ccc::Error(ccc::ErrorKind::InvalidArgument,
                     fmt::format("tile_bytes must be a positive multiple of 64, not {}", kernel.tile_bytes));
  if (kernel.channels < 1 || kernel.channels > ccc::Communicator::kMaxChannels)
    throw ccc::Error(ccc::ErrorKind::InvalidArgument, fmt::format("channels must be in 1 .. {}, not {}",
                                                                  ccc::Communicator::kMaxChannels, kernel.channels));
  if (kernel.pipeline < 1)
    throw ccc::Error(ccc::ErrorKind::InvalidArgument, fmt::format("pipeline must be at least 1, not {}", kernel.pipeline));

  const ccc::SourceFile file = load_source(name, text);
  ccc::CodegenOptions options;
  options.instantiate = {.nranks = nranks, .root = root};
  options.kernel = kernel;
  options.last = target->last_pass;
  ccc::Diagnostics diags;
  std::optional<ccc::CodegenResult> result = ccc::run_codegen(file, options, diags);
  if (!result) throw_diagnostics(diags, &file);
  const ccc::StepProgram& program = result->planned ? result->planned->program : *result->program;
  std::string out;
  try {
    out = target->emit({program, result->planned ? &*result->planned : nullptr, result->plan ? &*result->plan : nullptr,
                        result->kernel ? &*result->kernel : nullptr, arch, in_place, show_syncs, topo ? &*topo : nullptr,
                        static_cast<int>(ccc::data_type_size(kernel.dtype)), cost_grid});
  } catch (const ccc::Error&) {
    throw;
  } catch (const std::runtime_error& e) {  // NVRTC refused the kernel
    throw ccc::Error(ccc::ErrorKind::Compile, e.what());
  }
  if (std::string(target->name) == "cubin") return nb::bytes(out.data(), out.size());
  return nb::str(out.data(), out.size());
}

// ---- the communicator ----------------------------------------------------------------------

using Array = nb::ndarray<nb::ro>;  // send: read-only arrays are fine
using WritableArray = nb::ndarray<>;

template <typename A>
ccc::DataType array_dtype(const A& a, const char* what, size_t rank) {
  const nb::dlpack::dtype t = a.dtype();
  if (t.lanes == 1) {
    using Code = nb::dlpack::dtype_code;
    switch (static_cast<Code>(t.code)) {
      case Code::Float:
        if (t.bits == 64) return ccc::DataType::F64;
        if (t.bits == 32) return ccc::DataType::F32;
        if (t.bits == 16) return ccc::DataType::F16;
        break;
      case Code::Bfloat:
        if (t.bits == 16) return ccc::DataType::BF16;
        break;
      case Code::Int:
        if (t.bits == 64) return ccc::DataType::I64;
        if (t.bits == 32) return ccc::DataType::I32;
        if (t.bits == 8) return ccc::DataType::I8;
        break;
      case Code::UInt:
        if (t.bits == 64) return ccc::DataType::U64;
        if (t.bits == 32) return ccc::DataType::U32;
        if (t.bits == 8) return ccc::DataType::U8;
        break;
      default: break;
    }
  }
  static const char* const kCodes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const std::string code = t.code < std::size(kCodes) ? kCodes[t.code] : fmt::format("code {}", t.code);
  throw ccc::Error(ccc::ErrorKind::InvalidArgument,
                   fmt::format("{}[{}]: element type {}{}{} is not supported (float64, float32, float16, "
                               "bfloat16, int64, uint64, int32, uint32, int8, uint8)",
                               what, rank, code, t.bits, t.lanes == 1 ? "" : fmt::format("x{}", t.lanes)));
}

// Whether the array's elements are one dense row-major block (any stride of a size-1 axis).
template <typename A>
bool is_c_contiguous(const A& a) {
  if (a.size() == 0) return true;  // nothing to lay out (NumPy gives an empty array any strides)
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

struct Buffers {
  std::vector<const void*> send;
  std::vector<void*> recv;
  std::vector<const void*> residual;  // all_reduce's epilogue, or none
  std::vector<const void*> weight;    // its RMSNorm, or none
  std::vector<void*> residual_out;
  std::vector<void*> quant_out;  // its fp8 output (uint8 arrays of the e4m3 bits), or none
  std::optional<float> quant_scale;
  uint64_t hidden = 0;
  float eps = 0;
  uint64_t send_count = 0;
  uint64_t recv_count = 0;
  ccc::DataType dtype = ccc::DataType::F32;
};

class PyCommunicator {
 public:
  // `rank`: the one rank this process holds of a multi-process communicator; -1: every rank.
  explicit PyCommunicator(ccc::Communicator comm, int rank = -1) : comm_(std::move(comm)), rank_(rank) {}

  int size() const { return comm_.size(); }
  double virtual_seconds() {
    double t = 0;
    run([&] { t = comm_.virtual_seconds(); }, /*exclusive=*/false);
    return t;
  }
  std::string critical_path() {
    std::string path;
    run([&] { path = comm_.critical_path(); }, /*exclusive=*/false);
    return path;
  }
  std::string backend() const { return ccc::backend_name(comm_.backend()); }

  // Per-rank send and recv arrays: one per rank here (one of a multi-process rank), one device type (CPU for host, CUDA for cuda),
  // one element type, each C-contiguous with the same size on every rank. (In place, the Python
  // side passes the send arrays as recv too; nanobind has made sure recv arrays are writable.)
  Buffers buffers(const std::vector<Array>& send, const std::vector<WritableArray>& recv,
                  const std::vector<Array>& residual = {}) const {
    const size_t n = rank_ >= 0 ? 1 : static_cast<size_t>(comm_.size());
    auto invalid = [](const std::string& m) { throw ccc::Error(ccc::ErrorKind::InvalidArgument, m); };
    if (send.size() != n) invalid(fmt::format("send: expected one array per rank ({}), got {}", n, send.size()));
    if (recv.size() != n) invalid(fmt::format("recv: expected one array per rank ({}), got {}", n, recv.size()));
    const int device = comm_.backend() == ccc::BackendKind::Cuda ? nb::device::cuda::value : nb::device::cpu::value;
    Buffers b;
    b.dtype = array_dtype(send[0], "send", 0);
    auto check = [&](const auto& a, const char* what, size_t r, uint64_t& count) {
      if (a.device_type() != device)
        invalid(fmt::format("{}[{}]: the {} backend needs {} arrays, not {} memory", what, r, backend(),
                            device == nb::device::cpu::value ? "host (CPU)" : "CUDA device",
                            a.device_type() == nb::device::cpu::value ? "host" : "device"));
      const ccc::DataType t = array_dtype(a, what, r);
      if (t != b.dtype)
        invalid(fmt::format("{}[{}]: element type {} differs from send[0]'s {}", what, r, ccc::data_type_name(t),
                            ccc::data_type_name(b.dtype)));
      if (!is_c_contiguous(a)) invalid(fmt::format("{}[{}]: the array is not contiguous", what, r));
      if (r == 0) count = a.size();
      if (a.size() != count)
        invalid(fmt::format("{}[{}]: {} elements where {}[0] has {}", what, r, a.size(), what, count));
    };
    for (size_t r = 0; r < n; ++r) {
      check(send[r], "send", r, b.send_count);
      b.send.push_back(send[r].data());
    }
    for (size_t r = 0; r < n; ++r) {
      check(recv[r], "recv", r, b.recv_count);
      b.recv.push_back(recv[r].data());
    }
    if (!residual.empty() && residual.size() != n)
      invalid(fmt::format("residual: expected one array per rank ({}), got {}", n, residual.size()));
    uint64_t residual_count = 0;
    for (size_t r = 0; r < residual.size(); ++r) {
      check(residual[r], "residual", r, residual_count);
      b.residual.push_back(residual[r].data());
    }
    if (!residual.empty() && residual_count != b.send_count)
      invalid(fmt::format("residual: {} elements per rank where send has {}; they must be equal", residual_count,
                          b.send_count));
    return b;
  }

  static void same_counts(const char* what, const Buffers& b) {
    if (b.send_count != b.recv_count)
      throw ccc::Error(ccc::ErrorKind::InvalidArgument,
                       fmt::format("{}: send has {} elements per rank, recv {}; they must be equal", what,
                                   b.send_count, b.recv_count));
  }
  void blocks(const char* what, uint64_t small, uint64_t large, const char* small_name, const char* large_name) const {
    if (large != small * static_cast<uint64_t>(comm_.size()))
      throw ccc::Error(ccc::ErrorKind::InvalidArgument,
                       fmt::format("{}: {} must hold ranks ({}) x {} elements ({}), not {}", what, large_name,
                                   comm_.size(), small_name, small * static_cast<uint64_t>(comm_.size()), large));
  }

  // The collective itself runs without the GIL: the ranks wait on each other, and other Python
  // threads (or a Python-side timeout watchdog) keep running. Inside the gate (call_gate.h), so
  // destroy() waits for it; a collective of a multi-process rank (`exclusive`) is refused while
  // another thread is inside one. Ctrl-C aborts the ranks this process holds and raises
  // KeyboardInterrupt (docs/python.md).
  template <typename F>
  void run(F&& f, bool exclusive = true) {
    const ccc::python::CallGate::Call call(*gate_, exclusive && rank_ >= 0);
    ccc::python::run_interruptible(f, [this] { abort_held_ranks(); });
  }
  // What Ctrl-C and destroy() do to the calls inside: cccCommAbort's first half, so that a
  // rank waiting for a peer stops now (and its peers in other processes too).
  void abort_held_ranks() {
    for (int r = rank_ >= 0 ? rank_ : 0; r < (rank_ >= 0 ? rank_ + 1 : comm_.size()); ++r) comm_.abort_rank(r);
  }

  // Every rank's part here, or this process's rank's. A host rank's call returns when done, as
  // the host backend's all-ranks calls do; a CUDA rank's is queued on its stream and returns, as
  // the single-process CUDA calls do (stream-ordered, so it can be captured into a CUDA graph).
  void launch(ccc::Collective collective, const Buffers& b, uint64_t count, ccc::ReduceOp op, int root,
              const std::vector<uintptr_t>& streams) {
    ccc::CollectiveCall call{collective, count, b.dtype, op, root, b.send, b.recv};
    if (!b.residual.empty()) {
      call.epilogue = b.weight.empty() ? ccc::Epilogue::Residual : ccc::Epilogue::ResidualRmsNorm;
      call.residual = b.residual;
      call.weight = b.weight;
      call.residual_out = b.residual_out;
      call.hidden = b.hidden;
      call.eps = b.eps;
      call.quant_scale = b.quant_scale;
      call.quant_out = b.quant_out;
    }
    const ccc::Communicator::Streams stream = stream_span(streams);
    run([&] {
      if (rank_ < 0) {
        comm_.run(call, stream);
        return;
      }
      comm_.run_rank(call, rank_, b.send[0], b.recv[0], stream.empty() ? nullptr : stream[0],
                     {b.residual.empty() ? nullptr : b.residual[0], b.weight.empty() ? nullptr : b.weight[0],
                      b.residual_out.empty() ? nullptr : b.residual_out[0], b.quant_out.empty() ? nullptr : b.quant_out[0]});
      if (comm_.backend() != ccc::BackendKind::Cuda) comm_.synchronize();
    });
  }

  // `residual`: one array per rank for the fused allreduce + residual (Epilogue::Residual), or
  // none; `weight` (one per rank, the row's length) adds the RMSNorm, `residual_out` (none, or one
  // per rank) its pre-norm sums, `quant_out` (none, or one uint8 array per rank) with
  // `quant_scale` its output quantised to fp8 e4m3.
  void all_reduce(const std::vector<Array>& send, const std::vector<WritableArray>& recv, ccc::ReduceOp op,
                  const std::vector<uintptr_t>& streams, const std::vector<Array>& residual,
                  const std::vector<Array>& weight, const std::vector<WritableArray>& residual_out, float eps,
                  const std::vector<WritableArray>& quant_out, std::optional<float> quant_scale) {
    Buffers b = buffers(send, recv, residual);
    if (!weight.empty()) {
      auto invalid = [](const std::string& m) { throw ccc::Error(ccc::ErrorKind::InvalidArgument, m); };
      if (residual.empty()) invalid("rms_weight: the RMSNorm comes after the residual add: pass residual too");
      if (weight.size() != b.send.size())
        invalid(fmt::format("rms_weight: expected one array per rank ({}), got {}", b.send.size(), weight.size()));
      if (!residual_out.empty() && residual_out.size() != b.send.size())
        invalid(fmt::format("residual_out: expected one array per rank ({}), got {}", b.send.size(), residual_out.size()));
      for (size_t r = 0; r < weight.size(); ++r) {
        if (array_dtype(weight[r], "rms_weight", r) != b.dtype || !is_c_contiguous(weight[r]) ||
            weight[r].size() != weight[0].size())
          invalid(fmt::format("rms_weight[{}]: must be contiguous, of send's type, and as long as rms_weight[0]", r));
        b.weight.push_back(weight[r].data());
      }
      for (size_t r = 0; r < residual_out.size(); ++r) {
        if (array_dtype(residual_out[r], "residual_out", r) != b.dtype || !is_c_contiguous(residual_out[r]) ||
            residual_out[r].size() != b.send_count)
          invalid(fmt::format("residual_out[{}]: must be contiguous, of send's type and size", r));
        b.residual_out.push_back(residual_out[r].data());
      }
      b.hidden = weight[0].size();
      b.eps = eps;
      if (quant_out.empty() != !quant_scale)
        invalid("quant_out and scale: the fp8 output needs both (one uint8 array per rank, and the scale)");
      if (!quant_out.empty() && quant_out.size() != b.send.size())
        invalid(fmt::format("quant_out: expected one array per rank ({}), got {}", b.send.size(), quant_out.size()));
      for (size_t r = 0; r < quant_out.size(); ++r) {
        if (array_dtype(quant_out[r], "quant_out", r) != ccc::DataType::U8 || !is_c_contiguous(quant_out[r]) ||
            quant_out[r].size() != b.send_count)
          invalid(fmt::format("quant_out[{}]: must be contiguous uint8 (the e4m3 bits) of send's size", r));
        b.quant_out.push_back(quant_out[r].data());
      }
      b.quant_scale = quant_scale;
    } else if (!quant_out.empty() || quant_scale) {
      throw ccc::Error(ccc::ErrorKind::InvalidArgument,
                       "quant_out: the fp8 output quantises the RMSNorm's: pass residual and rms_weight too");
    }
    same_counts("all_reduce", b);
    launch(ccc::Collective::AllReduce, b, b.send_count, op, -1, streams);
  }
  void reduce(const std::vector<Array>& send, const std::vector<WritableArray>& recv, int root, ccc::ReduceOp op,
              const std::vector<uintptr_t>& streams) {
    Buffers b = buffers(send, recv);
    same_counts("reduce", b);
    launch(ccc::Collective::Reduce, b, b.send_count, op, root, streams);
  }
  void broadcast(const std::vector<Array>& send, const std::vector<WritableArray>& recv, int root,
                 const std::vector<uintptr_t>& streams) {
    Buffers b = buffers(send, recv);
    same_counts("broadcast", b);
    launch(ccc::Collective::Broadcast, b, b.send_count, ccc::ReduceOp::Sum, root, streams);
  }
  void all_gather(const std::vector<Array>& send, const std::vector<WritableArray>& recv,
                  const std::vector<uintptr_t>& streams) {
    Buffers b = buffers(send, recv);
    blocks("all_gather", b.send_count, b.recv_count, "send", "recv");
    launch(ccc::Collective::AllGather, b, b.send_count, ccc::ReduceOp::Sum, -1, streams);
  }
  void reduce_scatter(const std::vector<Array>& send, const std::vector<WritableArray>& recv, ccc::ReduceOp op,
                      const std::vector<uintptr_t>& streams) {
    Buffers b = buffers(send, recv);
    blocks("reduce_scatter", b.recv_count, b.send_count, "recv", "send");
    launch(ccc::Collective::ReduceScatter, b, b.recv_count, op, -1, streams);
  }

  void all_to_all(const std::vector<Array>& send, const std::vector<WritableArray>& recv,
                  const std::vector<uintptr_t>& streams) {
    Buffers b = buffers(send, recv);
    same_counts("all_to_all", b);
    const uint64_t n = static_cast<uint64_t>(comm_.size());
    if (b.send_count % n != 0)
      throw ccc::Error(ccc::ErrorKind::InvalidArgument,
                       fmt::format("all_to_all: send and recv hold {} elements per rank, not ranks ({}) x a block",
                                   b.send_count, n));
    launch(ccc::Collective::AllToAll, b, b.send_count / n, ccc::ReduceOp::Sum, -1, streams);
  }

  // Registration (cccCommRegister, cccCommGraphRegisterBegin/End): this process's rank's
  // array (any array in one process); handles as integers, for the Python side to wrap.
  uintptr_t register_buffer(const Array& a) {
    if (a.size() > 0 && !is_c_contiguous(a))
      throw ccc::Error(ccc::ErrorKind::InvalidArgument, "array: not contiguous (a registration covers one range)");
    void* handle = nullptr;
    run([&] { handle = comm_.register_buffer(const_cast<void*>(a.data()), a.nbytes()); });
    return reinterpret_cast<uintptr_t>(handle);
  }
  void deregister_buffer(uintptr_t handle) {
    run([&] { comm_.deregister_buffer(reinterpret_cast<void*>(handle)); });
  }
  void begin_graph_registration() {
    run([&] { comm_.begin_graph_registration(); });  // may wait for another thread's collective
  }
  uintptr_t end_graph_registration() {
    void* handle = nullptr;
    run([&] { handle = comm_.end_graph_registration(); });
    return reinterpret_cast<uintptr_t>(handle);
  }

  void synchronize() {
    run([&] { comm_.synchronize(); }, /*exclusive=*/false);  // issues nothing: may overlap a call
  }
  // Waits (without the GIL) for the calls other threads are inside, after aborting them, so that
  // they raise in their threads instead of running on a destroyed communicator.
  void destroy() {
    bool first = false;
    {
      nb::gil_scoped_release release;
      first = gate_->close([this] {
        try {
          abort_held_ranks();
        } catch (...) {
          // A forked child's copy (nothing of it runs here), or an abort that failed: the calls
          // inside then end at their timeout, and are waited for all the same.
        }
      });
    }
    if (!first) throw ccc::Error(ccc::ErrorKind::InvalidUsage, "communicator used after destroy");
    comm_.destroy();
  }

 private:
  // CUDA streams as the integers CuPy's and torch's stream objects hand out (0: the default):
  // one per rank this process holds.
  ccc::Communicator::Streams stream_span(const std::vector<uintptr_t>& streams) {
    if (streams.empty()) return {};
    const size_t n = rank_ >= 0 ? 1 : static_cast<size_t>(comm_.size());
    if (streams.size() != n)
      throw ccc::Error(ccc::ErrorKind::InvalidArgument,
                       fmt::format("streams: expected one per rank ({}), got {}", n, streams.size()));
    streams_.assign(streams.size(), nullptr);
    for (size_t i = 0; i < streams.size(); ++i) streams_[i] = reinterpret_cast<void*>(streams[i]);
    return streams_;
  }

  ccc::Communicator comm_;
  int rank_;
  std::vector<void*> streams_;
  std::unique_ptr<ccc::python::CallGate> gate_ = std::make_unique<ccc::python::CallGate>();  // movable
};

// The CommOptions every constructor takes, made once by the Python side (ccc.Communicator).
ccc::CommOptions comm_options(const std::string& algo, const std::optional<std::string>& schedule_name,
                              const std::optional<std::string>& schedule_text, int channels, int64_t tile_bytes,
                              std::optional<ccc::Protocol> protocol, const std::string& topology_file,
                              std::optional<double> timeout, int block_threads, bool timing_only,
                              bool graph_replays) {
  ccc::CommOptions o;
  o.algo = algo;
  if (schedule_name) o.schedule = load_source(*schedule_name, schedule_text);
  o.channels = channels;
  o.tile_bytes = tile_bytes;
  o.protocol = protocol;
  o.topology_file = topology_file;
  o.timeout_seconds = timeout;
  o.host_block_threads = block_threads;
  o.sim_timing_only = timing_only;
  o.sim_graph_replays = graph_replays;
  return o;
}

ccc::UniqueId unique_id(const nb::bytes& uid) {
  ccc::UniqueId id;
  if (uid.size() != id.bytes.size())
    throw ccc::Error(ccc::ErrorKind::InvalidArgument,
                     fmt::format("uid: expected the {} bytes of ccc.get_unique_id(), got {}", id.bytes.size(),
                                 uid.size()));
  std::memcpy(id.bytes.data(), uid.c_str(), id.bytes.size());
  return id;
}

const char* error_class(ccc::ErrorKind kind) {
  switch (kind) {
    case ccc::ErrorKind::InvalidArgument: return "InvalidArgumentError";
    case ccc::ErrorKind::InvalidUsage: return "InvalidUsageError";
    case ccc::ErrorKind::NoDevice: return "NoDeviceError";
    case ccc::ErrorKind::Cuda: return "CudaError";
    case ccc::ErrorKind::Compile: return "CompileError";
    case ccc::ErrorKind::Remote: return "RemoteError";
    case ccc::ErrorKind::System: return "SystemResourceError";
    case ccc::ErrorKind::Internal: return "InternalError";
  }
  return "Error";
}

}  // namespace

NB_MODULE(_ccc, m) {
  m.doc() = "The C++ core of the ccc package; use the `ccc` module.";
  ccc::python::remember_main_thread(
      nb::cast<unsigned long>(nb::module_::import_("threading").attr("main_thread")().attr("ident")));
  // NVRTC may come from a wheel of this interpreter (nvidia-cuda-nvrtc-cu12, which PyTorch
  // installs) where no toolkit is: its site-packages join the search (nvrtc_library.h).
  try {
    nb::module_ site = nb::module_::import_("site");
    std::vector<std::string> dirs = nb::cast<std::vector<std::string>>(site.attr("getsitepackages")());
    dirs.push_back(nb::cast<std::string>(site.attr("getusersitepackages")()));
    ccc::add_nvrtc_site_packages(dirs);
  } catch (const std::exception&) {
    // An interpreter whose `site` lacks these (old virtualenvs): the toolkit's NVRTC, or
    // $CCC_NVRTC, still serve. (A Python error raised here is cleared with its exception.)
  }

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    nb::module_ errors = nb::module_::import_("ccc._errors");
    try {
      std::rethrow_exception(p);
    } catch (const ScheduleDiagnostics& d) {
      nb::object e = errors.attr("DiagnosticError")(d.rendered, d.file, d.line, d.column, d.message);
      PyErr_SetObject(e.type().ptr(), e.ptr());
    } catch (const ccc::Error& e) {
      PyErr_SetString(errors.attr(error_class(e.kind())).ptr(), e.what());
    }
  });

  // Each enum member is ccc's name upper-cased (DataType.BF16, ReduceOp.SUM, Collective.REDUCE_SCATTER):
  // the Python side also takes the names as strings.
  nb::enum_<ccc::DataType> dtype(m, "DataType", "An element type.");
  for (ccc::DataType t : ccc::kAllDataTypes) dtype.value(upper(ccc::data_type_name(t)).c_str(), t);
  nb::enum_<ccc::ReduceOp> op(m, "ReduceOp", "A reduction; avg is the sum divided by the number of ranks.");
  for (ccc::ReduceOp o : ccc::kAllReduceOps) op.value(upper(ccc::reduce_op_name(o)).c_str(), o);
  nb::enum_<ccc::Protocol> protocol(m, "Protocol",
                                    "How a rank gets a peer's data: SIMPLE loads it (bandwidth); LL has it pushed "
                                    "in 8-byte lines with a flag (latency, small messages).");
  for (ccc::Protocol p : {ccc::Protocol::Simple, ccc::Protocol::Ll}) protocol.value(upper(ccc::protocol_name(p)).c_str(), p);
  nb::enum_<ccc::Collective> collective(m, "Collective", "A collective a schedule implements.");
  for (ccc::Collective c : ccc::kAllCollectives) collective.value(upper(ccc::collective_name(c)).c_str(), c);

  nb::class_<CheckResult>(m, "CheckResult", "What ccc.check proved about a schedule.")
      .def_ro("schedule", &CheckResult::schedule, "the schedule's name")
      .def_ro("collective", &CheckResult::collective)
      .def_ro("ranks", &CheckResult::ranks)
      .def_prop_ro("roots", [](const CheckResult& r) { return nb::typed<nb::tuple, int, nb::ellipsis>(nb::cast(r.roots)); },
                   "the roots verified (broadcast and reduce); empty otherwise")
      .def_ro("steps", &CheckResult::steps)
      .def_ro("ops", &CheckResult::ops)
      .def_ro("waits", &CheckResult::waits, "waits the sync planner kept (for the last root checked)")
      .def_ro("cross_rank_dependencies", &CheckResult::cross_rank_dependencies,
              "cross-rank dependencies before reduction (last root)")
      .def_prop_ro("notes", [](const CheckResult& r) { return nb::typed<nb::tuple, nb::str, nb::ellipsis>(nb::cast(r.notes)); },
                   "the planner's notes, e.g. staging it inserted")
      .def("__eq__", [](const CheckResult& a, const CheckResult& b) { return a == b; })
      .def("__repr__", [](nb::handle self) {
        nb::object fields = nb::make_tuple(self.attr("schedule"), self.attr("collective"), self.attr("ranks"),
                                           self.attr("roots"), self.attr("steps"), self.attr("ops"), self.attr("waits"),
                                           self.attr("cross_rank_dependencies"), self.attr("notes"));
        return nb::str("CheckResult(schedule={!r}, collective={}, ranks={}, roots={!r}, steps={}, ops={}, waits={}, "
                       "cross_rank_dependencies={}, notes={!r})")
            .format(*fields);
      });

  m.def("check", &check, nb::arg("name"), nb::arg("text").none(), nb::arg("ranks"), nb::kw_only(), nb::arg("root").none(),
        nb::arg("every_root_up_to"), nb::arg("in_place"));
  m.def("compile", &compile, nb::arg("name"), nb::arg("text").none(), nb::arg("ranks"), nb::kw_only(), nb::arg("root"),
        nb::arg("emit"), nb::arg("in_place"), nb::arg("dtype"), nb::arg("op"), nb::arg("tile_bytes").none(),
        nb::arg("channels").none(), nb::arg("pipeline").none(), nb::arg("protocol").none(), nb::arg("arch"),
        nb::arg("show_syncs"), nb::arg("topology").none());
  m.def("emit_targets", [] { return ccc::emit_target_names(); });
  m.def("get_unique_id", [] {
    const ccc::UniqueId id = ccc::Communicator::unique_id();
    return nb::bytes(id.bytes.data(), id.bytes.size());
  });

  nb::class_<ccc::CommOptions>(m, "CommOptions");
  m.def("comm_options", &comm_options, nb::kw_only(), nb::arg("algo"), nb::arg("schedule_name").none(),
        nb::arg("schedule_text").none(), nb::arg("channels"), nb::arg("tile_bytes"), nb::arg("protocol").none(),
        nb::arg("topology_file"), nb::arg("timeout").none(), nb::arg("block_threads"), nb::arg("timing_only"),
        nb::arg("graph_replays"));

  nb::class_<PyCommunicator>(m, "Communicator")
      .def_static(
          "host",
          [](int nranks, const ccc::CommOptions& options) {
            return PyCommunicator(ccc::Communicator::host(nranks, options));
          },
          nb::arg("ranks"), nb::arg("options"))
      .def_static(
          "sim",
          [](int nranks, const ccc::CommOptions& options) {
            return PyCommunicator(ccc::Communicator::sim(nranks, options));
          },
          nb::arg("ranks"), nb::arg("options"))
      .def_static(
          "cuda",
          [](std::vector<int> devices, const ccc::CommOptions& options) {
            return PyCommunicator(ccc::Communicator::cuda(std::move(devices), options));
          },
          nb::arg("devices"), nb::arg("options"))
      .def_static(
          "host_rank",
          [](const nb::bytes& uid, int nranks, int rank, const ccc::CommOptions& options) {
            const ccc::UniqueId id = unique_id(uid);
            nb::gil_scoped_release release;  // the bootstrap waits for the other processes
            return PyCommunicator(ccc::Communicator::host_rank(id, nranks, rank, options), rank);
          },
          nb::arg("uid"), nb::arg("nranks"), nb::arg("rank"), nb::arg("options"))
      .def_static(
          "cuda_rank",
          [](const nb::bytes& uid, int nranks, int rank, int device, const ccc::CommOptions& options) {
            const ccc::UniqueId id = unique_id(uid);
            nb::gil_scoped_release release;
            return PyCommunicator(ccc::Communicator::cuda_rank(id, nranks, rank, options, {.device = device}), rank);
          },
          nb::arg("uid"), nb::arg("nranks"), nb::arg("rank"), nb::arg("device"), nb::arg("options"))
      .def_prop_ro("size", &PyCommunicator::size)
      .def_prop_ro("backend", &PyCommunicator::backend)
      .def("virtual_seconds", &PyCommunicator::virtual_seconds)
      .def("critical_path", &PyCommunicator::critical_path)
      .def("all_reduce", &PyCommunicator::all_reduce, nb::arg("send"), nb::arg("recv"), nb::arg("op"),
           nb::arg("streams"), nb::arg("residual"), nb::arg("weight"), nb::arg("residual_out"), nb::arg("eps"),
           nb::arg("quant_out"), nb::arg("quant_scale").none())
      .def("reduce", &PyCommunicator::reduce, nb::arg("send"), nb::arg("recv"), nb::arg("root"), nb::arg("op"),
           nb::arg("streams"))
      .def("broadcast", &PyCommunicator::broadcast, nb::arg("send"), nb::arg("recv"), nb::arg("root"),
           nb::arg("streams"))
      .def("all_gather", &PyCommunicator::all_gather, nb::arg("send"), nb::arg("recv"), nb::arg("streams"))
      .def("reduce_scatter", &PyCommunicator::reduce_scatter, nb::arg("send"), nb::arg("recv"), nb::arg("op"),
           nb::arg("streams"))
      .def("all_to_all", &PyCommunicator::all_to_all, nb::arg("send"), nb::arg("recv"), nb::arg("streams"))
      .def("register_buffer", &PyCommunicator::register_buffer, nb::arg("array"))
      .def("deregister_buffer", &PyCommunicator::deregister_buffer, nb::arg("handle"))
      .def("begin_graph_registration", &PyCommunicator::begin_graph_registration)
      .def("end_graph_registration", &PyCommunicator::end_graph_registration)
      .def("synchronize", &PyCommunicator::synchronize)
      .def("destroy", &PyCommunicator::destroy);
}
