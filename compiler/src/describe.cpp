#include "describe.h"

#include <fmt/format.h>

#include "sync_plan.h"

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

std::string describe_step(const StepProgram& p, int step) { return describe_step(p.steps, step); }

std::string describe_step(const std::vector<StepInfo>& steps, int step) {
  if (step < 0) return "start";
  if (step >= static_cast<int>(steps.size())) return "exit";
  const StepInfo& info = steps[step];
  const int number = info.number >= 0 ? info.number : step;  // the schedule's, as --emit steps shows it
  return info.label.empty() ? fmt::format("step {}", number) : fmt::format("step {} ({})", number, info.label);
}

std::string describe_line(const StepProgram& p, SourceLoc loc) { return describe_line(p.file, loc); }

std::string describe_line(const std::string& file, SourceLoc loc) {
  if (!loc.valid()) return "";
  return fmt::format("{}:{}", file.empty() ? "<input>" : file, loc.line);
}

std::string wait_why(const Wait& w, const std::vector<StepInfo>& steps, const std::string& file) {
  const std::string line = describe_line(file, w.loc);
  const std::string at_line = line.empty() ? "" : " (" + line + ")";
  const std::string mem = w.in_place_input ? describe_chunks(Buffer::Output, w.chunks) + " (in place: its input)"
                                           : describe_chunks(w.buffer, w.chunks);
  switch (w.reason) {
    case SyncReason::RAW:
      return fmt::format("reads {} of rank {}, written at {}{}", mem, w.peer, describe_step(steps, w.step), at_line);
    case SyncReason::Entry:
      return fmt::format("reads {} of rank {}, ready once it has started{}", mem, w.peer, at_line);
    case SyncReason::WAR:
      return fmt::format("overwrites {}, which rank {} reads at {}{}", mem, w.peer, describe_step(steps, w.step), at_line);
    case SyncReason::Exit:
      return fmt::format("rank {} reads {} of this rank at {}{}", w.peer, mem, describe_step(steps, w.step), at_line);
    case SyncReason::LlSlots:
      return "its receive slots are free (its previous launch read them) before the first send to it";
    case SyncReason::WAW: break;
  }
  return "";
}

}  // namespace ccc
