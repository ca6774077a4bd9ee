#include "kernel_plan.h"

#include <fmt/format.h>

namespace ccc {

const char* storage_name(Storage s) {
  switch (s) {
    case Storage::Output: return "output";
    case Storage::Input: return "input";
    case Storage::Scratch: return "scratch";
    case Storage::Staging: return "staging";
    case Storage::Ll: return "ll";
    case Storage::Slot: return "slot";
  }
  return "?";
}

bool touches_slot(const DataPass& pass) {
  if (pass.dst == Storage::Slot) return true;
  for (const Operand& o : pass.operands)
    if (o.buffer == Storage::Slot) return true;
  return false;
}

bool reads_what_writes(const DataPass& reader, const Operand& o, const DataPass& writer, int rank) {
  if (o.rank != rank || o.buffer != writer.dst) return false;
  if (o.buffer == Storage::Slot) return o.slot == writer.to.slot;
  return ChunkRange{reader.chunks.begin + o.shift, reader.chunks.count}.overlaps(writer.chunks);
}

namespace {

const char* short_name(Storage b) {
  switch (b) {
    case Storage::Output: return "out";
    case Storage::Input: return "in";
    case Storage::Scratch: return "scratch";
    case Storage::Staging: return "staging";
    case Storage::Ll: return "ll";
    case Storage::Slot: return "slot";
  }
  return "?";
}

std::string chunk_text(ChunkRange c) {
  return c.count == 1 ? fmt::format("[{}]", c.begin) : fmt::format("[{}..{}]", c.begin, c.end() - 1);
}

std::string operand_text(const Operand& o, int rank, ChunkRange c) {
  // An LL region is the reader's own, filled by o.rank: "ll3[2] (from r1)".
  if (o.buffer == Storage::Ll) return fmt::format("ll{}{} (from r{})", o.slot, chunk_text(c), o.rank);
  // A scratch slot holding the pass's chunk: "r1.slot3[2]".
  if (o.buffer == Storage::Slot)
    return fmt::format("{}slot{}{}", o.rank == rank ? "" : fmt::format("r{}.", o.rank), o.slot, chunk_text(c));
  return fmt::format("{}{}{}", o.rank == rank ? "" : fmt::format("r{}.", o.rank), short_name(o.buffer),
                     chunk_text({c.begin + o.shift, c.count}));
}

}  // namespace

std::string wait_text(const Wait& w, const KernelPlan& plan) {
  std::string text = w.step < 0 ? fmt::format("wait rank {} entered", w.peer)
                                : fmt::format("wait rank {} step {}", w.peer, w.step);
  const std::string why = wait_why(w, plan.steps, plan.file);
  return fmt::format("{} ({}{}{})", text, sync_reason_name(w.reason), why.empty() ? "" : ": ", why);
}

std::string traffic_text(const Traffic& t) {
  return fmt::format("reads {} ({} remote), writes {}", t.read, t.read_remote, t.written);
}

std::string blocks_text(int64_t blocks) { return blocks == 1 ? "count" : fmt::format("{} * count", blocks); }

bool completing_write_finishes(const KernelOptions& o) {
  return reduce_op_finishes(o.op) || o.epilogue != Epilogue::None;
}

std::string pass_text(const DataPass& pass, int rank, ReduceOp op, Epilogue epilogue) {
  std::string operands;
  for (const Operand& o : pass.operands)
    operands += fmt::format("{}{}", operands.empty() ? "" : ", ", operand_text(o, rank, pass.chunks));
  std::string value = pass.kind == OpKind::Copy ? operands : fmt::format("{}({})", reduce_op_name(op), operands);
  if (pass.completes && reduce_op_finishes(op)) value = fmt::format("{} / N", value);
  if (pass.completes && epilogue != Epilogue::None) value += " + residual";
  if (pass.dst == Storage::Ll)
    return fmt::format("send r{}.ll{}{} = {}", pass.to.rank, pass.to.slot, chunk_text(pass.chunks), value);
  if (pass.dst == Storage::Slot) return fmt::format("slot{}{} = {}", pass.to.slot, chunk_text(pass.chunks), value);
  return fmt::format("{}{} = {}", short_name(pass.dst), chunk_text(pass.chunks), value);
}

Traffic pass_traffic(const DataPass& pass, int rank) {
  Traffic t;
  for (const Operand& o : pass.operands) {
    t.read += pass.chunks.count;
    if (o.rank != rank) t.read_remote += pass.chunks.count;
  }
  t.written = pass.chunks.count;
  return t;
}

Traffic rank_traffic(const RankPlan& plan, int rank) {
  Traffic total;
  auto add = [&](const DataPass& pass) {
    Traffic t = pass_traffic(pass, rank);
    total.read += t.read;
    total.read_remote += t.read_remote;
    total.written += t.written;
  };
  for (const StepPlan& step : plan.steps) {
    for (const DataPass& pass : step.entry_sends) add(pass);
    for (const DataPass& pass : step.passes) add(pass);
    for (const DataPass& pass : step.sends) add(pass);
  }
  for (const DataPass& pass : plan.passthrough) add(pass);
  return total;
}

std::string print_kernel_plan(const KernelPlan& plan) {
  const KernelOptions& o = plan.options;
  std::string out = fmt::format("kernel plan: {} {} ({}), {} ranks, {} chunks, {} steps\n", collective_name(plan.collective),
                                plan.schedule, plan.file, plan.nranks, plan.nchunks, plan.nsteps());
  out += fmt::format("  dtype {}, op {}, tile {} B, {} channels, pipeline {}, {}{}\n", data_type_name(o.dtype), reduce_op_name(o.op),
                     o.tile_bytes, o.channels, o.pipeline, o.in_place ? "in place" : "out of place",
                     o.protocol == Protocol::Ll ? fmt::format(", protocol ll ({} receive regions per rank)", plan.ll_slots) : "");
  const std::string vector = blocks_text(plan.blocks);
  std::string space;
  if (plan.uses_scratch)
    space += plan.scratch_slots > 0 ? fmt::format(", scratch {} slots of one chunk per rank", plan.scratch_slots)
                                    : fmt::format(", scratch {} elements per rank", blocks_text(plan.scratch_blocks));
  if (plan.uses_staging) space += fmt::format(", staging {} elements per rank", vector);
  out += fmt::format("  waits {} (sync plan: {} cross-rank edges){}\n", plan.waits, plan.cross_rank_edges,
                     space.empty() ? ", scratch none" : space);
  out += fmt::format("  traffic in chunks; one chunk = {} * {} / {} bytes\n", vector, data_type_size(o.dtype), plan.nchunks);
  for (int r = 0; r < plan.nranks; ++r) {
    const RankPlan& rank = plan.ranks[r];
    out += fmt::format("rank {}:\n", r);
    for (int k = 0; k < plan.nsteps(); ++k) {
      out += fmt::format("  step {} ({}):\n", k, plan.steps[k].label);
      const StepPlan& step = rank.steps[k];
      for (const Wait& w : step.waits) out += fmt::format("    {}\n", wait_text(w, plan));
      for (std::span<const DataPass> list : pass_lists(step))
        for (const DataPass& pass : list)
          out += fmt::format("    {}  -- {}\n", pass_text(pass, r, o.op, o.epilogue), traffic_text(pass_traffic(pass, r)));
    }
    for (const DataPass& pass : rank.passthrough)
      out += fmt::format("  passthrough: {}  -- {}\n", pass_text(pass, r, o.op, o.epilogue), traffic_text(pass_traffic(pass, r)));
    for (const Wait& w : rank.exit_waits) out += fmt::format("  exit: {}\n", wait_text(w, plan));
    out += fmt::format("  total: {}\n", traffic_text(rank_traffic(rank, r)));
  }
  return out;
}

}  // namespace ccc
