// One rank of a multi-process host communicator, for tests/unit/test_multiprocess.cpp, which
// starts one process of this per rank:
//   ccc_mp_rank ID_HEX NRANKS RANK SCENARIO [ARG]
// and reads its exit status (0: what the scenario expects happened) and its stderr (why not).
// Scenarios:
//   collectives   every mp_cases.h case, with malloc'd buffers and with cccCommMemAlloc ones,
//                 checked against the reference (collective_reference.h)
//   init          joins, reports, leaves (exit 10 + the cccResult_t of a failed init)
//   mismatch      rank 0 passes another count: every rank must fail, and again afterwards (a
//                 failed multi-process communicator stays failed)
//   roots         each rank broadcasts as the root: every rank must fail, naming the root
//   small-arena   (run with a small CCC_ARENA_BYTES) an allreduce on cccCommMemAlloc memory that
//                 fills most of the heap runs in place; the same on malloc'd memory, which needs
//                 a staging copy, is refused with cccSystemError on every rank, and the
//                 communicator still works after that
//   kill K        rank K queues an allreduce and SIGKILLs itself: the others must fail
//   abort K       rank K aborts instead of calling: the others must fail well within the timeout
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ccc/ccc.h"
#include "collective_reference.h"
#include "mp_cases.h"

namespace {

using ccc::mp::Case;

int fail(const std::string& what) {
  std::fprintf(stderr, "rank failed: %s\n", what.c_str());
  return 1;
}

std::string said(cccComm_t comm, cccResult_t r) {
  return std::string(cccGetErrorString(r)) + ": " + cccGetLastError(comm);
}

cccDataType_t c_type(ccc::DataType t) {
  switch (t) {
    case ccc::DataType::I8: return cccInt8;
    case ccc::DataType::U8: return cccUint8;
    case ccc::DataType::I32: return cccInt32;
    case ccc::DataType::U32: return cccUint32;
    case ccc::DataType::I64: return cccInt64;
    case ccc::DataType::U64: return cccUint64;
    case ccc::DataType::F16: return cccFloat16;
    case ccc::DataType::F32: return cccFloat32;
    case ccc::DataType::F64: return cccFloat64;
    case ccc::DataType::BF16: return cccBfloat16;
    case ccc::DataType::F8E4M3: return cccFloat8e4m3;
    case ccc::DataType::F8E5M2: return cccFloat8e5m2;
  }
  return cccNumTypes;
}

cccRedOp_t c_op(ccc::ReduceOp op) {
  switch (op) {
    case ccc::ReduceOp::Sum: return cccSum;
    case ccc::ReduceOp::Prod: return cccProd;
    case ccc::ReduceOp::Min: return cccMin;
    case ccc::ReduceOp::Max: return cccMax;
    case ccc::ReduceOp::Avg: return cccAvg;
  }
  return cccNumOps;
}

cccResult_t issue(const Case& c, const void* send, void* recv, cccComm_t comm) {
  const cccDataType_t t = c_type(c.dtype);
  switch (c.collective) {
    case ccc::Collective::AllReduce: return cccAllReduce(send, recv, c.count, t, c_op(c.op), comm, nullptr);
    case ccc::Collective::ReduceScatter: return cccReduceScatter(send, recv, c.count, t, c_op(c.op), comm, nullptr);
    case ccc::Collective::AllGather: return cccAllGather(send, recv, c.count, t, comm, nullptr);
    case ccc::Collective::Broadcast: return cccBroadcast(send, recv, c.count, t, c.root, comm, nullptr);
    case ccc::Collective::Reduce: return cccReduce(send, recv, c.count, t, c_op(c.op), c.root, comm, nullptr);
    case ccc::Collective::AllToAll: return cccAllToAll(send, recv, c.count, t, comm, nullptr);
  }
  return cccInternalError;
}

// Runs `c` on buffers from the arena (`arena`) or from malloc, and checks this rank's result.
int run_case(cccComm_t comm, int n, int rank, const Case& c, bool arena, uint64_t salt) {
  const ccc::CollectiveCall call{c.collective, c.count, c.dtype, c.op, c.root, {}, {}};
  const size_t es = ccc::data_type_size(c.dtype), sb = ccc::send_bytes(call, n), rb = ccc::recv_bytes(call, n);
  const size_t recv_at = c.in_place ? 0 : (sb + 255) / 256 * 256;
  const size_t total = c.in_place ? std::max(sb, rb) : recv_at + rb;
  void* mem = nullptr;
  if (arena) {
    if (cccResult_t r = cccCommMemAlloc(comm, &mem, total); r != cccSuccess) return fail("cccCommMemAlloc: " + said(comm, r));
  } else {
    mem = std::aligned_alloc(256, (total + 255) / 256 * 256);
  }
  auto* base = static_cast<unsigned char*>(mem);
  const size_t block = static_cast<size_t>(rank) * c.count * es;  // the rank's block, in place
  unsigned char* send = base;
  unsigned char* recv = base + recv_at;
  if (c.in_place && c.collective == ccc::Collective::ReduceScatter) recv = base + block;
  if (c.in_place && c.collective == ccc::Collective::AllGather) send = base + block;
  ccc::poison(c.dtype, rb / es, recv);
  ccc::fill_input(c.dtype, rank, salt, sb / es, send);  // in place: the input wins
  std::vector<std::vector<unsigned char>> inputs(n, std::vector<unsigned char>(sb));
  std::vector<const void*> input_ptrs;
  for (int r = 0; r < n; ++r) {
    ccc::fill_input(c.dtype, r, salt, sb / es, inputs[r].data());
    input_ptrs.push_back(inputs[r].data());
  }
  const std::string name = std::string(ccc::collective_name(c.collective)) + " " + ccc::data_type_name(c.dtype) +
                           (c.in_place ? " in place" : "") + (arena ? " (arena)" : " (malloc)");
  cccResult_t r = issue(c, send, recv, comm);
  if (r == cccSuccess) r = cccCommSynchronize(comm);
  int status = 0;
  if (r != cccSuccess) {
    status = fail(name + ": " + said(comm, r));
  } else if (const uint64_t wrong = ccc::count_wrong(call, n, rank, input_ptrs, recv); wrong != 0) {
    status = fail(name + ": " + std::to_string(wrong) + " wrong elements");
  }
  if (arena) {
    if (cccResult_t f = cccCommMemFree(comm, mem); f != cccSuccess) status = fail("cccCommMemFree: " + said(comm, f));
  } else {
    std::free(mem);
  }
  return status;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// One allreduce that must fail on this rank; prints how long the failure took.
int expect_failure(cccComm_t comm, uint64_t count, const char* why) {
  std::vector<int> data(count, 1);
  const auto start = std::chrono::steady_clock::now();
  cccResult_t r = cccAllReduce(data.data(), data.data(), count, cccInt32, cccSum, comm, nullptr);
  if (r == cccSuccess) r = cccCommSynchronize(comm);
  if (r != cccRemoteError) return fail(std::string(why) + ": expected cccRemoteError, got " + said(comm, r));
  std::fprintf(stderr, "failed after %.3f s as expected: %s\n", seconds_since(start), cccGetLastError(comm));
  cccResult_t async = cccSuccess;
  if (cccCommGetAsyncError(comm, &async) != cccSuccess || async != cccRemoteError)
    return fail(std::string(why) + ": cccCommGetAsyncError does not report the failure");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) return fail("usage: ccc_mp_rank ID_HEX NRANKS RANK SCENARIO [ARG]");
  cccUniqueId id{};
  const std::string hex = argv[1];
  for (size_t i = 0; i < sizeof id.internal && 2 * i + 1 < hex.size(); ++i)
    id.internal[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  const int n = std::atoi(argv[2]), rank = std::atoi(argv[3]);
  const std::string scenario = argv[4];
  const int arg = argc > 5 ? std::atoi(argv[5]) : -1;

  cccComm_t comm = nullptr;
  if (cccResult_t r = cccCommInitRank(&comm, n, id, rank); r != cccSuccess) {
    std::fprintf(stderr, "init failed: %s: %s\n", cccGetErrorString(r), cccGetLastError(nullptr));
    return 10 + r;
  }
  int status = 0;
  if (scenario == "collectives") {
    uint64_t salt = 1;
    for (const Case& c : ccc::mp::cases(n))
      for (bool arena : {false, true}) status |= run_case(comm, n, rank, c, arena, salt++);
  } else if (scenario == "mismatch") {
    status = expect_failure(comm, rank == 0 ? 5 : 7, "counts that differ");
    if (status == 0) status = expect_failure(comm, 7, "a call after a failure");
  } else if (scenario == "roots") {
    // Every rank names itself the broadcast's root: none reads another's data, so only the exit
    // waits' check of the peers' calls can tell (two ranks used to succeed with their own data).
    std::vector<int> data(1000, rank);
    cccResult_t r = cccBroadcast(data.data(), data.data(), data.size(), cccInt32, rank, comm, nullptr);
    if (r == cccSuccess) r = cccCommSynchronize(comm);
    if (r != cccRemoteError || std::string(cccGetLastError(comm)).find("root") == std::string::npos)
      status = fail("broadcast roots that differ: expected cccRemoteError naming the root, got " + said(comm, r));
  } else if (scenario == "small-arena") {
    const Case c = ccc::mp::small_arena_case();
    status |= run_case(comm, n, rank, c, true, 1);
    std::vector<int> data(c.count, 1);
    void* filler = nullptr;  // the arena buffer run_case had, still taken
    if (cccCommMemAlloc(comm, &filler, c.count * sizeof(int)) != cccSuccess) return fail("cccCommMemAlloc");
    const cccResult_t r = cccAllReduce(data.data(), data.data(), c.count, cccInt32, cccSum, comm, nullptr);
    if (r != cccSystemError || std::string(cccGetLastError(comm)).find("no room") == std::string::npos)
      status |= fail("staging that does not fit: expected cccSystemError, got " + said(comm, r));
    cccCommMemFree(comm, filler);
    status |= run_case(comm, n, rank, c, true, 2);
  } else if (scenario == "kill" || scenario == "abort") {
    std::vector<int> data(1000, 1);
    cccResult_t r = cccAllReduce(data.data(), data.data(), data.size(), cccInt32, cccSum, comm, nullptr);
    if (r == cccSuccess) r = cccCommSynchronize(comm);
    if (r != cccSuccess) return fail("the first allreduce: " + said(comm, r));
    if (rank == arg && scenario == "kill") {
      cccAllReduce(data.data(), data.data(), data.size(), cccInt32, cccSum, comm, nullptr);
      ::kill(::getpid(), SIGKILL);
    }
    if (rank == arg) return cccCommAbort(comm) == cccSuccess ? 0 : fail("cccCommAbort");
    status = expect_failure(comm, data.size(), scenario.c_str());
  } else if (scenario != "init") {
    status = fail("unknown scenario " + scenario);
  }
  if (cccResult_t r = cccCommDestroy(comm); r != cccSuccess) status = fail("cccCommDestroy: " + said(comm, r));
  return status;
}
