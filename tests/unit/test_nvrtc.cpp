// Every generated kernel compiles with NVRTC, for Ampere and Hopper, to a cubin, with no warnings.
// Registers and spills of each kernel go to the test log (ptxas -v); the data loops must not spill.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "emit_cuda.h"
#include "lower.h"
#include "nvrtc_compile.h"
#include "ccc_abi.h"  // CCC_MAX_DEVICE_RANKS
#include "codegen_pipeline.h"

namespace ccc {
namespace {

struct Case {
  const char* schedule;
  int ranks;
};

PlannedProgram planned(const Case& c) {
  testing::Planned p = testing::plan_shipped(c.schedule, c.ranks);
  if (!p.planned) throw std::runtime_error(p.errors);
  return *p.planned;
}

// The data-moving loops (ccc::combine and ccc::copy_together, and ProtocolLl::ll_pass for protocol
// ll) must not spill; the small spills ptxas reports elsewhere are registers saved around the
// out-of-line calls. Returns the offending report lines.
std::string data_loop_spills(const std::string& log) {
  std::istringstream in(log);
  std::string line, function, out;
  while (std::getline(in, line)) {
    if (line.find("Function properties for ") != std::string::npos) function = line;
    else if ((function.find("combine") != std::string::npos || function.find("copy_together") != std::string::npos ||
              function.find("ll_pass") != std::string::npos) &&
             line.find(" 0 bytes spill stores") == std::string::npos &&
             line.find("spill stores") != std::string::npos)
      out += function + "\n" + line + "\n";
  }
  return out;
}

// The spill instructions (STL/LDL at the stack pointer R1, the ABI's) of each function of a
// kernel's SASS (`nvdisasm -c`) whose name contains `function`, that lie inside at least
// `depth` loops (a loop: a backward branch to a label and the code between them), one per line
// as "function: instruction". ptxas' report says how many bytes a function spills, not where:
// this says whether it is in a hot loop or once around one.
std::string spills_in_loops(const std::string& sass, const std::string& function, int depth) {
  static const std::regex kFunction(R"(^\$[^$]+\$(\S+):$)"), kLabel(R"(^\s*(\.L_x_\d+):)"),
      kBranch(R"(\bBRA\b.*`\((\.L_x_\d+)\))"), kSpill(R"(\b(STL|LDL)(\.\S+)?\s.*\[R1[\]+ ])");
  struct Function {
    std::string name;
    std::vector<std::string> lines;
  };
  std::vector<Function> functions;
  std::istringstream in(sass);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_match(line, m, kFunction)) functions.push_back({m[1], {}});
    else if (!functions.empty()) functions.back().lines.push_back(line);
  }
  std::string out;
  for (const Function& f : functions) {
    if (f.name.find(function) == std::string::npos) continue;
    std::map<std::string, size_t> labels;
    std::vector<std::pair<size_t, size_t>> loops;  // [label, branch]
    for (size_t i = 0; i < f.lines.size(); ++i) {
      std::smatch m;
      if (std::regex_search(f.lines[i], m, kLabel)) labels[m[1]] = i;
      if (std::regex_search(f.lines[i], m, kBranch))
        if (auto it = labels.find(m[1]); it != labels.end()) loops.push_back({it->second, i});
    }
    for (size_t i = 0; i < f.lines.size(); ++i) {
      if (!std::regex_search(f.lines[i], kSpill)) continue;
      int nesting = 0;
      for (const auto& [from, to] : loops) nesting += from <= i && i <= to;
      if (nesting >= depth) out += f.name + ": " + f.lines[i] + "\n";
    }
  }
  return out;
}

// nvdisasm's SASS of a cubin. The toolkit here lacks nvdisasm; CMake finds the PyPI wheel's
// (python/requirements-dev.txt) in .venv.
std::string disassemble(const std::string& cubin) {
  const std::filesystem::path nvdisasm = CCC_NVDISASM;
  if (!std::filesystem::is_regular_file(nvdisasm))
    throw std::runtime_error("no nvdisasm at '" + nvdisasm.string() + "': `make deps` installs it into .venv");
  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("ccc_nvdisasm_" + std::to_string(::getpid()) + ".cubin");
  std::ofstream(file, std::ios::binary) << cubin;
  const std::string command = "'" + nvdisasm.string() + "' -c '" + file.string() + "' 2>&1";
  std::string sass;
  if (FILE* pipe = ::popen(command.c_str(), "r")) {
    char buffer[65536];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) sass.append(buffer, n);
    ::pclose(pipe);
  }
  std::filesystem::remove(file);
  return sass;
}

TEST(Nvrtc, FindsSpillsInsideLoopsOfTheDisassembly) {
  const std::string sass =
      "$k$_Z7ll_passv:\n"
      "        /*0000*/                   STL [R1+0x68], R35 ;\n"     // before the loops
      ".L_x_1:\n"
      "        /*0010*/                   LDL R10, [R1+0x68] ;\n"     // in the outer loop
      ".L_x_2:\n"
      "        /*0020*/                   LDL.64 R2, [R1+0x70] ;\n"   // in both
      "        /*0030*/                   LDL R4, [R12+0x50] ;\n"     // not the stack pointer
      "        /*0040*/              @P0 BRA `(.L_x_2) ;\n"
      "        /*0050*/              @P1 BRA `(.L_x_1) ;\n"
      "        /*0060*/                   BRA `(.L_x_3) ;\n"          // forward: no loop
      ".L_x_3:\n"
      "        /*0070*/                   STL [R1], R3 ;\n"
      "$k$_Z3runv:\n"
      ".L_x_4:\n"
      "        /*0080*/                   STL [R1+0x8], R2 ;\n"
      "        /*0090*/                   BRA `(.L_x_4) ;\n";
  EXPECT_EQ(spills_in_loops(sass, "ll_pass", 2), "_Z7ll_passv:         /*0020*/                   LDL.64 R2, [R1+0x70] ;\n");
  const std::string outer = spills_in_loops(sass, "ll_pass", 1), any = spills_in_loops(sass, "", 1);
  EXPECT_EQ(std::count(outer.begin(), outer.end(), '\n'), 2) << outer;
  EXPECT_EQ(std::count(any.begin(), any.end(), '\n'), 3) << any;
}

NvrtcRequest request(const std::string& source, const char* arch, NvrtcTarget target) {
  NvrtcRequest req;
  req.source = source;
  req.arch = arch;
  req.target = target;
  return req;
}

void expect_compiles(const EmittedKernel& k, const char* arch) {
  NvrtcRequest req = request(k.source, arch, NvrtcTarget::Cubin);
  req.options = {kPtxasVerbose};
  NvrtcOutput out = nvrtc_compile(req);
  ASSERT_TRUE(out.ok) << k.kernel_name << " " << arch << ":\n" << out.log;
  EXPECT_FALSE(out.image.empty());
  EXPECT_EQ(nvrtc_warnings(out.log), "") << k.kernel_name << " " << arch;
  KernelResources r = parse_ptxas_report(out.log);
  EXPECT_GT(r.registers, 0) << out.log;
  EXPECT_EQ(data_loop_spills(out.log), "") << k.kernel_name << " " << arch << ":\n" << out.log;
  std::printf("[nvrtc] %-44s %s  %3d registers, %d B spill stores, %d B spill loads, %d B stack, %.0f ms\n",
              k.kernel_name.c_str(), arch, r.registers, r.spill_stores, r.spill_loads, r.stack_bytes, out.compile_ms);
}

TEST(Nvrtc, ParsesPtxasReport) {
  const KernelResources r = parse_ptxas_report(
      "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
      "ptxas info    : Function properties for k\n"
      "    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 84 registers, used 0 barriers, 400 bytes cmem[0]\n");
  EXPECT_EQ(r.registers, 84);
  EXPECT_EQ(r.stack_bytes, 16);
  EXPECT_EQ(r.spill_stores, 8);
  EXPECT_EQ(r.spill_loads, 12);
  const KernelResources none = parse_ptxas_report("ptxas info    : Compiling entry function 'k'\n");
  EXPECT_EQ(none.registers, -1);
  EXPECT_EQ(none.spill_stores, -1);
}

TEST(Nvrtc, EveryDtypeForAmpereAndHopper) {
  const PlannedProgram pp = planned({"ring", 4});
  for (DataType t : kAllDataTypes) {
    KernelOptions o;
    o.dtype = t;
    o.op = data_type_is_float(t) ? ReduceOp::Avg : ReduceOp::Sum;
    EmittedKernel k = emit_cuda(testing::lowered(pp, o));
    for (const char* arch : {"sm_80", "sm_90"}) expect_compiles(k, arch);
  }
}

// Protocol ll: the small-message schedules and ring (1- and 2-source passes) at N = 8 over every
// dtype (packed lines, two lines per 8-byte element), both architectures; the line loop must not
// spill either. Each runs rank 0's table through ccc::RankMap (butterfly: the xor map), the form
// whose line loop once spilled 12-148 B (docs/performance.md, "Source size under ll").
TEST(Nvrtc, LlEveryDtypeForAmpereAndHopper) {
  for (const char* schedule : {"oneshot", "twoshot", "ring", "butterfly"}) {
    const PlannedProgram pp = planned({schedule, 8});
    for (DataType t : kAllDataTypes) {
      KernelOptions o;
      o.dtype = t;
      o.op = data_type_is_float(t) ? ReduceOp::Avg : ReduceOp::Sum;
      o.protocol = Protocol::Ll;
      EmittedKernel k = emit_cuda(testing::lowered(pp, o));
      EXPECT_NE(k.source.find("ccc::send("), std::string::npos) << k.kernel_name;
      EXPECT_NE(k.source.find("ccc::RankMap<"), std::string::npos) << k.kernel_name;
      for (const char* arch : {"sm_80", "sm_90"}) expect_compiles(k, arch);
    }
  }
}

// The fused allreduce + residual: the completing write's extra vector of residual loads, for
// the 2-source fold (ring), the 8-source one (one-shot) and the ll line loop, on the types the
// epilogue serves (bf16, f16, f32; fp8 for the width of one byte), both architectures; no data
// loop may spill.
TEST(Nvrtc, ResidualEpilogueKernelsCompileWithoutSpills) {
  for (const auto& [schedule, protocol] : {std::pair{"ring", Protocol::Simple}, std::pair{"oneshot", Protocol::Simple},
                                           std::pair{"twoshot", Protocol::Ll}}) {
    const PlannedProgram pp = planned({schedule, 8});
    for (DataType t : {DataType::BF16, DataType::F16, DataType::F32, DataType::F8E4M3}) {
      KernelOptions o;
      o.dtype = t;
      o.protocol = protocol;
      o.epilogue = Epilogue::Residual;
      EmittedKernel k = emit_cuda(testing::lowered(pp, o));
      EXPECT_NE(k.source.find("ccc::add_residual<ccc::op_sum>"), std::string::npos) << k.kernel_name;
      EXPECT_NE(k.source.find(" + residual"), std::string::npos) << k.kernel_name;
      for (const char* arch : {"sm_80", "sm_90"}) expect_compiles(k, arch);
    }
    // RMSNorm after the exit waits (rmsnorm_rows, block_sum's shuffles): bf16, the models' type.
    KernelOptions o;
    o.dtype = DataType::BF16;
    o.protocol = protocol;
    o.epilogue = Epilogue::ResidualRmsNorm;
    EmittedKernel k = emit_cuda(testing::lowered(pp, o));
    EXPECT_NE(k.source.find("ccc::add_residual_rmsnorm<ccc::op_sum>"), std::string::npos) << k.kernel_name;
    for (const char* arch : {"sm_80", "sm_90"}) expect_compiles(k, arch);
  }
}

// Scratch slots (`scratch N slots`, tests/lit/run/allpairs_slots.sched), whose refs the
// interpreter addresses by the chunk a pass moves (ccc_peer_table.h, view): both protocols.
TEST(Nvrtc, ScratchSlotKernelsCompile) {
  const PlannedProgram pp = planned({"tests/lit/run/allpairs_slots.sched", 8});
  for (Protocol protocol : {Protocol::Simple, Protocol::Ll}) {
    KernelOptions o;
    o.dtype = DataType::BF16;
    o.protocol = protocol;
    EmittedKernel k = emit_cuda(testing::lowered(pp, o));
    EXPECT_NE(k.source.find("ccc::slot(0, 1)"), std::string::npos) << k.kernel_name;
    for (const char* arch : {"sm_80", "sm_90"}) expect_compiles(k, arch);
  }
}

// Protocol ll where every rank has its own table (trees and rooted rings are not symmetric, so
// no rank map). Here ptxas gives ll_pass 4-16 B of spills for some element types, which its
// report cannot place: the disassembly shows them in the chunk loop (a value or two reloaded
// once per chunk, around the window's computation), never in the loops inside it that move
// the lines (groups, sources, lines, polls). The element types where this happens (8-byte ones:
// two lines per element; f32 and f16 for the reduce), both architectures.
TEST(Nvrtc, LlPerRankTablesSpillNothingInsideTheChunkLoop) {
  for (const char* schedule : {"tree", "dbtree", "ring_reduce", "ring_broadcast"}) {
    const PlannedProgram pp = planned({schedule, 8});
    for (DataType t : {DataType::F64, DataType::I64, DataType::U64, DataType::F32, DataType::F16}) {
      KernelOptions o;
      o.dtype = t;
      o.op = data_type_is_float(t) ? ReduceOp::Avg : ReduceOp::Sum;
      o.protocol = Protocol::Ll;
      EmittedKernel k = emit_cuda(testing::lowered(pp, o));
      EXPECT_EQ(k.source.find("ccc::RankMap<"), std::string::npos) << k.kernel_name << ": a table per rank";
      for (const char* arch : {"sm_80", "sm_90"}) {
        NvrtcOutput out = nvrtc_compile(request(k.source, arch, NvrtcTarget::Cubin));
        ASSERT_TRUE(out.ok) << k.kernel_name << " " << arch << ":\n" << out.log;
        const std::string sass = disassemble(out.image);
        ASSERT_NE(sass.find("ll_pass"), std::string::npos) << k.kernel_name << " " << arch << ":\n" << sass;
        EXPECT_EQ(spills_in_loops(sass, "ll_pass", 2), "") << k.kernel_name << " " << arch;
      }
    }
  }
}

// Every shipped schedule: N = 8 for both architectures, every op at a small N. With
// CCC_NVRTC_FULL=1: N in {2, 3, 4, 5, 8} (where the schedule allows it) x every dtype x both
// architectures (slow: hundreds of compiles).
class NvrtcSchedule : public ::testing::TestWithParam<std::string> {};

TEST_P(NvrtcSchedule, Compiles) {
  const char* name = GetParam().c_str();
  const bool full = std::getenv("CCC_NVRTC_FULL") != nullptr;
  const PlannedProgram at8 = planned({name, 8});
  for (const char* arch : {"sm_80", "sm_90"}) expect_compiles(emit_cuda(testing::lowered(at8, {})), arch);
  const Collective c = at8.program.collective;
  const bool reduces = c != Collective::AllGather && c != Collective::Broadcast;
  for (ReduceOp op : kAllReduceOps) {
    if (!reduces) break;
    KernelOptions o;
    o.op = op;
    expect_compiles(emit_cuda(testing::lowered(planned({name, 4}), o)), "sm_90");
  }
  if (!full) return;
  for (int n : {2, 3, 4, 5, 8}) {
    testing::Planned p = testing::plan_shipped(name, n);
    if (!p.planned) continue;  // e.g. butterfly needs a power of two
    for (DataType t : kAllDataTypes) {
      KernelOptions o;
      o.dtype = t;
      EmittedKernel k = emit_cuda(testing::lowered(*p.planned, o));
      for (const char* arch : {"sm_80", "sm_90"}) expect_compiles(k, arch);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shipped, NvrtcSchedule, ::testing::ValuesIn(test::shipped_schedule_names()),
                         [](const auto& info) { return info.param; });

TEST(Nvrtc, PtxOnly) {
  NvrtcOutput out = nvrtc_compile(request(emit_cuda(testing::lowered(planned({"ring", 2}), {})).source, "sm_90", NvrtcTarget::Ptx));
  ASSERT_TRUE(out.ok) << out.log;
  EXPECT_NE(out.image.find(".entry ccc_ring_n2_f32_sum_t65536_c4_p2"), std::string::npos);
  EXPECT_NE(out.image.find("ld.acquire.sys"), std::string::npos);
  EXPECT_NE(out.image.find("st.release.sys"), std::string::npos);
  // The interpreter's hot state lives in shared memory: the step table (small enough here), the
  // ranks' fixed state and the peers' buffers (ccc::shared_program, Channel's constructor).
  for (const char* array : {"block_sharedINS_5InstrI", "block_sharedI14ccc_rank_state", "block_sharedI11ccc_buffers"}) {
    const size_t at = out.image.find(std::string(".shared .align 4 .b8 _ZZN3ccc12") + array);
    const size_t at8 = out.image.find(std::string(".shared .align 8 .b8 _ZZN3ccc12") + array);
    EXPECT_TRUE(at != std::string::npos || at8 != std::string::npos) << "no shared " << array;
  }
}

// Scopes (ccc_device_cuda.h): a kernel whose ranks all run on one device syncs in .gpu scope, every
// other one in .sys; both protocols (ll lines are sync operations too).
TEST(Nvrtc, OneDeviceKernelsSyncInGpuScopeOthersInSysScope) {
  const PlannedProgram pp = planned({"oneshot", 4});
  for (Protocol protocol : {Protocol::Simple, Protocol::Ll}) {
    for (bool one_device : {false, true}) {
      KernelOptions o;
      o.protocol = protocol;
      o.one_device = one_device;
      const EmittedKernel k = emit_cuda(testing::lowered(pp, o));
      EXPECT_EQ(k.kernel_name.ends_with("_gpu"), one_device) << k.kernel_name;
      NvrtcOutput out = nvrtc_compile(request(k.source, "sm_90", NvrtcTarget::Ptx));
      ASSERT_TRUE(out.ok) << out.log;
      const char* want = one_device ? ".gpu" : ".sys";
      const char* never = one_device ? ".sys" : ".gpu";
      for (const char* op : {"ld.acquire", "st.release", "st.relaxed", "ld.relaxed"})
        EXPECT_NE(out.image.find(std::string(op) + want), std::string::npos) << k.kernel_name << ": no " << op << want;
      EXPECT_EQ(out.image.find(never), std::string::npos) << k.kernel_name << " has " << never;
    }
  }
}

// The body of the kernel entry in `ptx` (from ".entry" to its closing brace), or "".
std::string entry_body(const std::string& ptx) {
  const size_t begin = ptx.find(".entry ");
  if (begin == std::string::npos) return "";
  const size_t end = ptx.find("\n}", begin);
  return ptx.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

// The labels the branches (bra, bra.uni) in `ptx` jump to.
std::vector<std::string> branch_targets(const std::string& ptx) {
  std::vector<std::string> out;
  for (size_t b = ptx.find("bra"); b != std::string::npos; b = ptx.find("bra", b + 1)) {
    const size_t label = ptx.find_first_not_of(" \t", ptx.find_first_of(" \t", b));
    const size_t end = ptx.find(';', label);
    if (label != std::string::npos && end != std::string::npos) out.push_back(ptx.substr(label, end - label));
  }
  return out;
}

// Programmatic dependent launch (ccc_device_cuda.h, Channel::enter): for sm_90 the kernel waits
// for the stream's previous grid (griddepcontrol.wait) before its first sync operation and before
// it calls into the interpreter, then releases the next grid (launch_dependents); for sm_80,
// which lacks the instructions, neither is there. Both protocols, a shared (relabelled) program
// and per-rank tables. Channel::enter is inlined into the entry, whose text is checked in order;
// with no branch before the wait landing after it, every path through the entry reaches the wait
// before anything that follows it in the text.
TEST(Nvrtc, Sm90KernelsWaitForThePriorGridBeforeTouchingSyncState) {
  const std::pair<Case, Protocol> kernels[] = {
      {{"oneshot", 4}, Protocol::Simple}, {{"oneshot", 4}, Protocol::Ll}, {{"ring", 3}, Protocol::Simple}};
  for (const auto& [c, protocol] : kernels) {
    KernelOptions o;
    o.protocol = protocol;
    const EmittedKernel k = emit_cuda(testing::lowered(planned(c), o));
    NvrtcOutput hopper = nvrtc_compile(request(k.source, "sm_90", NvrtcTarget::Ptx));
    ASSERT_TRUE(hopper.ok) << hopper.log;
    const std::string body = entry_body(hopper.image);
    ASSERT_FALSE(body.empty()) << k.kernel_name;
    const size_t wait = body.find("griddepcontrol.wait;");
    const size_t release = body.find("griddepcontrol.launch_dependents;");
    ASSERT_NE(wait, std::string::npos) << k.kernel_name;
    ASSERT_NE(release, std::string::npos) << k.kernel_name;
    EXPECT_LT(wait, release) << k.kernel_name << ": the next grid is released before this one waited";
    // Before the wait the entry reads only the launch arguments and the constant rank state
    // (ld.global into shared memory). Every other access of the entry to memory a previous
    // grid may write is a sync operation (progress, inbox, error words, ll lines), a plain
    // global store (the mailbox) or inside a callee (the interpreter). Nor does a thread leave
    // (ret, exit) before it waited: every block waits.
    for (const char* access : {"ld.acquire", "ld.relaxed", "st.release", "st.relaxed", "st.global", "atom.", "call",
                               "ret;", "exit;"}) {
      const size_t first = body.find(access);
      EXPECT_TRUE(first == std::string::npos || first > release)
          << k.kernel_name << ": " << access << " before griddepcontrol";
    }
    EXPECT_NE(body.find("ld.acquire", wait), std::string::npos) << k.kernel_name << ": the entry's acquire moved";
    // And text order is execution order up to the wait: no branch before it lands after it, so
    // every path through the prologue reaches the wait.
    for (const std::string& label : branch_targets(body.substr(0, wait))) {
      const size_t at = body.find("\n" + label + ":");
      EXPECT_TRUE(at != std::string::npos && at < wait) << k.kernel_name << ": a branch to " << label << " skips the wait";
    }
    NvrtcOutput ampere = nvrtc_compile(request(k.source, "sm_80", NvrtcTarget::Ptx));
    ASSERT_TRUE(ampere.ok) << ampere.log;
    EXPECT_EQ(ampere.image.find("griddepcontrol"), std::string::npos) << k.kernel_name << " for sm_80";
  }
}

// The vector loop of every ccc::combine instantiation (one per pass kind) in `ptx`: the 16-byte
// loads it issues before its first 16-byte store, which are all in flight together.
std::vector<int> loads_before_first_store(const std::string& ptx) {
  std::vector<int> out;
  for (size_t f = ptx.find(".func _ZN3ccc7combine"); f != std::string::npos; f = ptx.find(".func _ZN3ccc7combine", f + 1)) {
    if (ptx.find(';', f) < ptx.find('{', f)) continue;  // a declaration: no body
    const size_t end = ptx.find("\n}", f);
    const size_t store = ptx.find("st.v4.", f);
    if (store == std::string::npos || store > end) continue;
    int loads = 0;
    for (size_t l = ptx.find("ld.v4.", f); l < store; l = ptx.find("ld.v4.", l + 1)) ++loads;
    out.push_back(loads);
  }
  return out;
}

// The stores of every ccc::combine instantiation in `ptx` that are not whole 16-byte vectors
// (st.v4, generic or global) or call arguments (st.param): one element store (the scalar head and tail loop) where
// NVVM keeps the vector stores whole. It has split them before, into st.v2 and st.u32 pieces
// (five of the nine 16-byte stores of a copy), more store instructions for the same bytes.
std::vector<int> narrow_stores(const std::string& ptx) {
  std::vector<int> out;
  for (size_t f = ptx.find(".func _ZN3ccc7combine"); f != std::string::npos; f = ptx.find(".func _ZN3ccc7combine", f + 1)) {
    if (ptx.find(';', f) < ptx.find('{', f)) continue;  // a declaration: no body
    const std::string body = ptx.substr(f, ptx.find("\n}", f) - f);
    int narrow = 0;
    for (size_t at = body.find("\tst."); at != std::string::npos; at = body.find("\tst.", at + 1))
      if (body.compare(at, 7, "\tst.v4.") != 0 && body.compare(at, 14, "\tst.global.v4.") != 0 &&
          body.compare(at, 10, "\tst.param.") != 0)
        ++narrow;
    out.push_back(narrow);
  }
  return out;
}

// At least 8 16-byte loads in flight per thread in every data loop: a copy (one source, 8 per
// thread), folds of 2 and of 8 sources (every source's loads issued before the first add), in
// f32 and f16 (converted in float). And each 16-byte store stays one st.v4.
TEST(Nvrtc, DataLoopsKeepEightVectorLoadsInFlight) {
  for (const Case c : {Case{"ring", 4}, Case{"oneshot", 8}}) {
    for (DataType t : {DataType::F32, DataType::F16}) {
      KernelOptions o;
      o.dtype = t;
      const EmittedKernel k = emit_cuda(testing::lowered(planned(c), o));
      NvrtcOutput out = nvrtc_compile(request(k.source, "sm_90", NvrtcTarget::Ptx));
      ASSERT_TRUE(out.ok) << out.log;
      const std::vector<int> loads = loads_before_first_store(out.image);
      EXPECT_FALSE(loads.empty()) << k.kernel_name;
      for (int n : loads) EXPECT_GE(n, 8) << k.kernel_name;
      const std::vector<int> narrow = narrow_stores(out.image);
      EXPECT_EQ(narrow.size(), loads.size()) << k.kernel_name;
      for (int n : narrow) EXPECT_LE(n, 1) << k.kernel_name << ": a 16-byte store split into narrower ones";
      std::printf("[nvrtc] %-44s 16-byte loads in flight per combine: %s, narrow stores %s\n", k.kernel_name.c_str(),
                  ::testing::PrintToString(loads).c_str(), ::testing::PrintToString(narrow).c_str());
    }
  }
}

// The per-rank tables fit a block's 48 KiB of static shared memory up to CCC_MAX_DEVICE_RANKS
// (ring at N = 700 used to fail in ptxas: "uses too much shared data (0xdac0 bytes, 0xc000 max)").
TEST(Nvrtc, RingAtTheMostRanksAGpuKernelHasCompiles) {
  const EmittedKernel k = emit_cuda(testing::lowered(planned({"ring", CCC_MAX_DEVICE_RANKS}), KernelOptions{}));
  NvrtcRequest req = request(k.source, "sm_90", NvrtcTarget::Cubin);
  req.options = {kPtxasVerbose};
  const NvrtcOutput out = nvrtc_compile(req);
  ASSERT_TRUE(out.ok) << out.log.substr(0, 4000);
  std::smatch smem;
  ASSERT_TRUE(std::regex_search(out.log, smem, std::regex(R"((\d+) bytes smem)"))) << out.log;
  EXPECT_LE(std::stoi(smem[1]), 48 * 1024) << out.log;
  std::printf("[nvrtc] ring N = %d: %s bytes of shared memory, %.0f ms\n", CCC_MAX_DEVICE_RANKS, smem[1].str().c_str(),
              out.compile_ms);
}

TEST(Nvrtc, ReportsErrorsWithTheLog) {
  NvrtcOutput out = nvrtc_compile(request("#include \"ccc_device.h\"\nthis is not C++;\n", "sm_90", NvrtcTarget::Cubin));
  EXPECT_FALSE(out.ok);
  EXPECT_NE(out.log.find("error"), std::string::npos);
}

}  // namespace
}  // namespace ccc
