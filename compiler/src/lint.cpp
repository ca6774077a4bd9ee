#include "lint.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

#include "describe.h"

namespace ccc {
namespace {

constexpr int kMaxWarnings = 8;

// One location (rank, buffer, chunk): its last write and whether anything has read it since.
struct Slot {
  int32_t step = -1;  // the step of the last write; -1: none yet
  int32_t op = 0;     // that write's op in ops[rank][step]
  bool read = true;
};

class DeadWrites {
 public:
  explicit DeadWrites(const StepProgram& p)
      : p_(p), stride_(static_cast<size_t>(std::max(p.nchunks, p.nscratch))),
        slots_(static_cast<size_t>(p.nranks) * 3 * stride_) {}

  // Lock-step: every read of step k sees the values from before it, so reads go first.
  void run() {
    for (int k = 0; k < p_.nsteps(); ++k) {
      for (int r = 0; r < p_.nranks; ++r)
        for (const Op& op : p_.ops[r][k])
          for (int64_t c = op.chunks.begin; c < op.chunks.end(); ++c) {
            slot(op.peer, op.src, c + op.shift).read = true;
            if (op.kind == OpKind::Reduce) slot(r, op.dst, c).read = true;
          }
      for (int r = 0; r < p_.nranks; ++r)
        for (int i = 0; i < static_cast<int>(p_.ops[r][k].size()); ++i) {
          const Op& op = p_.ops[r][k][i];
          for (int64_t c = op.chunks.begin; c < op.chunks.end(); ++c) {
            Slot& s = slot(r, op.dst, c);
            if (s.step == k) continue;  // a further reduce into it in the same step
            if (!s.read) dead(r, s, describe_step(p_, k));
            s = {k, i, false};
          }
        }
    }
    // What the user sees at the end counts as read; scratch and working space do not.
    for (int r = 0; r < p_.nranks; ++r)
      for (int b = 0; b < 3; ++b)
        for (int64_t c = 0; c < buffer_chunks(p_, static_cast<Buffer>(b)); ++c) {
          const Slot& s = slot(r, static_cast<Buffer>(b), c);
          const bool result = static_cast<Buffer>(b) == Buffer::Output && output_holds_result(p_, r, c);
          if (!s.read && !result) dead(r, s, "the end");
        }
  }

  // The first overwritten (rank, chunk) of each DSL op, in program order, and how many more.
  void report(Diagnostics& diags, int& budget) const {
    for (const auto& [line_col, found] : by_op_) {
      if (budget-- <= 0) return;
      diags.warning(found.loc, fmt::format("{}{}", found.first,
                                     found.more ? fmt::format(" (and {} more (rank, chunk) pair{} of this op)", found.more,
                                                                         found.more == 1 ? "" : "s")
                                                : ""));
    }
  }

 private:
  Slot& slot(int r, Buffer b, int64_t c) {
    return slots_[(static_cast<size_t>(r) * 3 + static_cast<size_t>(b)) * stride_ + static_cast<size_t>(c)];
  }
  const Slot& slot(int r, Buffer b, int64_t c) const { return const_cast<DeadWrites*>(this)->slot(r, b, c); }

  void dead(int r, const Slot& s, const std::string& until) {
    const Op& op = p_.ops[r][s.step][s.op];
    auto key = std::make_pair(op.loc.line, op.loc.col);
    auto [it, fresh] = by_op_.try_emplace(key);
    if (!fresh) {
      ++it->second.more;
      return;
    }
    it->second.first = fmt::format("nothing reads what rank {} writes at {} ({}) before {}{}", r,
                                   describe_step(p_, s.step), describe_op(op, r), until,
                                   until == "the end" ? "" : " overwrites it");
    it->second.loc = op.loc;
  }

  struct Found {
    SourceLoc loc;
    std::string first;
    int64_t more = 0;
  };
  const StepProgram& p_;
  size_t stride_;  // chunks per (rank, buffer): the larger of output and scratch
  std::vector<Slot> slots_;
  std::map<std::pair<int, int>, Found> by_op_;  // by the op's line and column
};

}  // namespace

void lint(const StepProgram& p, Diagnostics& diags) {
  int budget = kMaxWarnings;
  std::map<std::pair<int, int>, std::vector<int>> idle;  // empty steps by their DSL `step`
  for (int k = 0; k < p.nsteps() && p.nranks > 1; ++k) {  // one rank: every step may be empty
    bool any = false;
    for (int r = 0; r < p.nranks && !any; ++r) any = !p.ops[r][k].empty();
    if (!any) idle[{p.steps[k].loc.line, p.steps[k].loc.col}].push_back(k);
  }
  for (const auto& [line_col, steps] : idle) {
    if (budget-- <= 0) break;
    diags.warning(p.steps[steps[0]].loc,
                  fmt::format("{} changes nothing: no rank has an op in it at N = {}{}", describe_step(p, steps[0]),
                              p.nranks, steps.size() > 1 ? fmt::format(" (nor in {} more steps of it)", steps.size() - 1) : ""));
  }
  DeadWrites dead(p);
  dead.run();
  dead.report(diags, budget);
}

}  // namespace ccc
