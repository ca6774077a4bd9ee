#include "step_program.h"

#include <fmt/format.h>

namespace ccc {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::AllReduce: return "allreduce";
    case Collective::ReduceScatter: return "reduce_scatter";
    case Collective::AllGather: return "allgather";
    case Collective::Broadcast: return "broadcast";
    case Collective::Reduce: return "reduce";
    case Collective::AllToAll: return "alltoall";
  }
  return "?";
}

const char* op_kind_name(OpKind k) { return k == OpKind::Reduce ? "reduce" : "copy"; }

std::string params_text(const std::vector<std::pair<std::string, int64_t>>& params) {
  std::string out;
  for (const auto& [name, value] : params) out += fmt::format(", {} = {}", name, value);
  return out;
}

const char* buffer_name(Buffer b) {
  switch (b) {
    case Buffer::Output: return "output";
    case Buffer::Input: return "input";
    case Buffer::Scratch: return "scratch";
  }
  return "?";
}

int64_t StepProgram::num_ops() const {
  int64_t n = 0;
  for (const auto& rank : ops)
    for (const auto& step : rank) n += static_cast<int64_t>(step.size());
  return n;
}

int64_t buffer_chunks(const StepProgram& p, Buffer b) {
  return b == Buffer::Scratch && p.nscratch > 0 ? p.nscratch : p.nchunks;
}

int blocks(const StepProgram& p) {
  switch (p.collective) {
    case Collective::ReduceScatter:
    case Collective::AllGather:
    case Collective::AllToAll: return p.nranks;
    default: return 1;
  }
}

int64_t chunk_position(const StepProgram& p, int64_t chunk) { return chunk % (p.nchunks / blocks(p)); }

bool remap_allowed(const StepProgram& p, Buffer src, int64_t read, Buffer dst, int64_t written) {
  if (p.scratch_slots && (src == Buffer::Scratch || dst == Buffer::Scratch)) return true;
  return chunk_position(p, read) == chunk_position(p, written);
}

ChunkRange owned_chunks(const StepProgram& p, int rank) {
  int64_t per = p.nchunks / p.nranks;
  return {rank * per, per};
}

namespace {
bool owns(const StepProgram& p, int rank, int64_t chunk) {
  const ChunkRange own = owned_chunks(p, rank);
  return chunk >= own.begin && chunk < own.end();
}
}  // namespace

bool input_holds(const StepProgram& p, int rank, int64_t chunk) {
  switch (p.collective) {
    case Collective::AllGather: return owns(p, rank, chunk);
    case Collective::Broadcast: return rank == p.root;
    default: return true;
  }
}

bool output_holds_result(const StepProgram& p, int rank, int64_t chunk) {
  switch (p.collective) {
    case Collective::ReduceScatter: return owns(p, rank, chunk);
    case Collective::Reduce: return rank == p.root;
    default: return true;
  }
}

std::vector<std::pair<int, int>> completing_reduces(const StepProgram& p, int rank) {
  std::vector<std::pair<int, int>> last(static_cast<size_t>(p.nchunks), {-1, -1});
  for (int k = 0; k < p.nsteps(); ++k) {
    const auto& ops = p.ops[static_cast<size_t>(rank)][static_cast<size_t>(k)];
    for (size_t i = 0; i < ops.size(); ++i) {
      if (ops[i].dst != Buffer::Output) continue;
      for (int64_t c = ops[i].chunks.begin; c < ops[i].chunks.end(); ++c)
        last[static_cast<size_t>(c)] = ops[i].kind == OpKind::Reduce ? std::pair{k, static_cast<int>(i)} : std::pair{-1, -1};
    }
  }
  return last;
}

}  // namespace ccc
