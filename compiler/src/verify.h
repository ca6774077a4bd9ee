// Verification: does the step program implement its collective?
//
// Symbolic execution under lock-step semantics. Every (rank, buffer, chunk) holds a multiset of
// contributions (q, c) -- "rank q's input chunk c"; ops keep chunk indices, so a chunk's multiset
// is a count per rank. Postconditions, on the output buffer when the program ends:
//   allreduce       every rank's chunk c holds (q, c) exactly once for every rank q.
//   reduce_scatter  rank r's owned chunks (owned_chunks()) hold every rank's contribution once;
//                   its other chunks are don't-care.
//   allgather       initially rank r's output holds only its owned chunks (the rest undefined);
//                   at the end every rank's chunk c holds exactly the contribution of its owner.
//   broadcast       initially only the root's output is defined; at the end every rank holds
//                   exactly the root's chunk c in chunk c.
//   reduce          the root's chunk c holds every rank's contribution once (others don't care).
// Inputs start like the outputs; scratch starts undefined. Reading something undefined is an
// error only if it reaches a chunk the postcondition looks at.
//
// Scale: exact multisets cost N^3 for ring-like schedules, so the full run uses a hash per value
// (sum of random 64-bit keys per (q, c) modulo 2^64, plus a count); only the chunks that fail are
// executed again with exact counts, to say what is missing or doubled. (Ops keep chunk indices and
// only owners or the root start defined, so a misplaced contribution shows as missing where it
// belongs and as doubled or undefined where it lands.)
#pragma once

#include "ccc/diagnostics.h"
#include "step_program.h"

namespace ccc {

// Verification and sync planning cost O(ops) memory (about 500 bytes per op, the planner's share
// the largest) and the planner O(N) time per kept wait, so they refuse larger programs (ring: up
// to N = 1448). The front end's own limit is 16 Mi ops.
inline constexpr int64_t kMaxAnalysedOps = int64_t{1} << 22;

// Shape checks every pass relies on: the size limit, peers and chunk ranges in bounds, nothing writes `input`,
// roots and chunk counts fit the collective, no destination chunk takes a copy and another write
// in the same step. Returns false (with diagnostics) when the program is malformed.
bool check_structure(const StepProgram& p, Diagnostics& diags);

// check_structure, then the postcondition. Returns true when the program is correct.
bool verify(const StepProgram& p, Diagnostics& diags);

}  // namespace ccc
