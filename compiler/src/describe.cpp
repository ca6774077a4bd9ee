#include "ccc/describe.h"

#include <fmt/format.h>

namespace ccc {

namespace {
// "chunk 3", "chunks 3..5".
std::string chunks_text(ChunkRange chunks) {
  if (chunks.count == 1) return fmt::format("chunk {}", chunks.begin);
  return fmt::format("chunks {}..{}", chunks.begin, chunks.end() - 1);
}
}  // namespace

std::string describe_chunks(Buffer b, ChunkRange chunks) { return fmt::format("{} {}", buffer_name(b), chunks_text(chunks)); }

std::string describe_op(const Op& op, int rank) {
  std::string from = op.peer == rank ? fmt::format("its own {}", buffer_name(op.src))
                                     : fmt::format("rank {}'s {}", op.peer, buffer_name(op.src));
  if (op.shift != 0) from += " " + chunks_text(op.read_chunks());  // a remap: say where it reads
  return fmt::format("{} {} from {}", op_kind_name(op.kind), describe_chunks(op.dst, op.chunks), from);
}

std::string describe_ref(const OpRef& ref, int nsteps) {
  if (ref.step < 0) return fmt::format("r{} start", ref.rank);
  if (ref.step >= nsteps) return fmt::format("r{} end", ref.rank);
  return fmt::format("r{} s{} op{}", ref.rank, ref.step, ref.op);
}

std::string describe_step(const StepProgram& p, int step) {
  if (step < 0) return "start";
  if (step >= p.nsteps()) return "exit";
  const std::string& label = p.steps[step].label;
  return label.empty() ? fmt::format("step {}", step) : fmt::format("step {} ({})", step, label);
}

std::string describe_line(const StepProgram& p, SourceLoc loc) {
  if (!loc.valid()) return "";
  return fmt::format("{}:{}", p.file.empty() ? "<input>" : p.file, loc.line);
}

}  // namespace ccc
