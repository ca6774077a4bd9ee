#include "print_steps.h"

#include <fmt/format.h>

namespace ccc {

namespace {
// " chunk 3", " chunks 3..5".
std::string chunks_text(const char* one, const char* many, ChunkRange chunks) {
  if (chunks.count == 1) return fmt::format(" {} {}", one, chunks.begin);
  return fmt::format(" {} {}..{}", many, chunks.begin, chunks.end() - 1);
}
}  // namespace

std::string print_op(const Op& op) {
  std::string s = op_kind_name(op.kind) + chunks_text("chunk", "chunks", op.read_chunks());
  if (op.dst != Buffer::Output) s += fmt::format(" into {}", buffer_name(op.dst));
  s += " from ";
  if (op.src != Buffer::Output) s += fmt::format("{} of ", buffer_name(op.src));
  s += std::to_string(op.peer);
  if (op.shift != 0) s += " as" + chunks_text("chunk", "chunks", op.chunks);
  return s;
}

std::string print_steps(const StepProgram& p, Epilogue epilogue) {
  const bool fused = epilogue != Epilogue::None && p.collective == Collective::AllReduce;
  std::vector<std::vector<std::pair<int, int>>> completing;  // [rank][chunk]
  if (fused)
    for (int r = 0; r < p.nranks; ++r) completing.push_back(completing_reduces(p, r));
  std::string out = fmt::format("# {} {} ({}): N = {}", collective_name(p.collective), p.schedule, p.file, p.nranks);
  if (p.root >= 0) out += fmt::format(", root = {}", p.root);
  out += params_text(p.params);
  out += fmt::format(", chunks = {}", p.nchunks);
  if (p.nscratch != 0) out += fmt::format(", scratch = {}{}", p.nscratch, p.scratch_slots ? " slots" : "");
  out += fmt::format(", steps = {}, ops = {}\n", p.nsteps(), p.num_ops());
  int width = static_cast<int>(std::to_string(p.nranks - 1).size());
  int phase = -1;
  for (int k = 0; k < p.nsteps(); ++k) {
    const StepInfo& info = p.steps[static_cast<size_t>(k)];
    if (info.phase != phase) {
      phase = info.phase;
      out += fmt::format("phase {}\n", p.phases[static_cast<size_t>(phase)].name);
    }
    out += fmt::format("  step {}  {}  (line {})\n", k, info.label, info.loc.line);
    for (int r = 0; r < p.nranks; ++r) {
      const auto& ops = p.ops[static_cast<size_t>(r)][static_cast<size_t>(k)];
      out += fmt::format("    r{:<{}} ", r, width);
      if (ops.empty()) out += " -";
      for (size_t i = 0; i < ops.size(); ++i) {
        out += (i ? "; " : " ") + print_op(ops[i]);
        if (!fused) continue;
        int64_t completed = 0;  // chunks of this op that it completes
        for (int64_t c = ops[i].chunks.begin; c < ops[i].chunks.end(); ++c)
          completed += completing[static_cast<size_t>(r)][static_cast<size_t>(c)] == std::pair{k, static_cast<int>(i)};
        if (completed > 0) out += " + residual";
      }
      out += "\n";
    }
  }
  if (fused && epilogue == Epilogue::ResidualRmsNorm)
    out += "after the exit waits\n  every rank: RMSNorm of its output's rows (the pre-norm sums to residual_out), on "
           "its channels and norm blocks\n";
  return out;
}

}  // namespace ccc
