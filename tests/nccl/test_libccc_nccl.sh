#!/bin/bash
# libccc-nccl end to end on the host (tests/nccl/CMakeLists.txt): the user's program, 4 processes,
# over the fake CUDA driver and the NCCL stand-in, ccc on its host backend.
#   1. linked against libccc-nccl, routed to NCCL: every collective reaches the stand-in (every
#      datatype);
#   2. routed to ccc: no collective ccc can run reaches it (gather, scatter, send/recv and the
#      PreMulSum ops still do);
#   3. routed by the model over a DGX H100 topology: right results, decisions logged once;
#   4. a program built for NCCL, with LD_PRELOAD=libccc-nccl;
#   5. the same with libccc-nccl first on the library path as libnccl.so.2;
#   6. two simulated nodes of 4 ranks: hierarchical allreduce, named or chosen by the model;
#   7. a communicator made inside a group stays NCCL's; ncclCommInitAll's ranks in one process,
#      driven from one thread, on either route;
#   8. one rank aborts: the others see the error, on either route.
# Usage: test_libccc_nccl.sh PROGRAM_CCC PROGRAM_NCCL LIBCCC_NCCL FAKE_NCCL FAKE_LIBCUDA TOPOLOGY WORKDIR
set -u
program_ccc=$(realpath "$1") program_nccl=$(realpath "$2") shim=$(realpath "$3") fake_nccl=$(realpath "$4")
fake_cuda=$(realpath "$5") topology=$(realpath "$6") work=$(realpath -m "$7")
rm -rf "$work" && mkdir -p "$work/driver" "$work/first"
# The program's -lcuda (libcuda.so.1) and ccc's dlopen of $CCC_LIBCUDA must find the same fake.
ln -s "$fake_cuda" "$work/driver/libcuda.so.1"
ln -s "$shim" "$work/first/libnccl.so.2"
export CCC_LIBCUDA=$work/driver/libcuda.so.1 FAKE_CUDA_DEVICES=1 CCC_BACKEND=host CCC_TIMEOUT=60 FAKE_NCCL_TIMEOUT=60
# Routed to NCCL the program checks every datatype (the stand-in's work only). ccc compiles a
# host kernel per datatype, op and collective (about 0.9 s each, 3.5 min for all 12 datatypes
# cold), so its routes check one datatype of each kind; CCC_NCCL_TEST_DTYPES=all checks all.
ccc_dtypes=${CCC_NCCL_TEST_DTYPES:-int8,bfloat16,float32,float8e4m3}
base_path=$work/driver:$(dirname "$fake_nccl")
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# run NAME [VAR=VALUE ...] -- COMMAND...: runs it, its output in $work/NAME.out, its calls to the
# stand-in in $work/NAME.log.
run() {
  local name=$1; shift
  local vars=()
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  rm -f "$work/$name.log"
  env LD_LIBRARY_PATH="$base_path" FAKE_NCCL_LOG="$work/$name.log" "${vars[@]}" timeout 300 "$@" > "$work/$name.out" 2>&1
  local rc=$?
  echo "== $name: exit $rc, $(grep -c . "$work/$name.log" 2>/dev/null || echo 0) calls to the stand-in"
  tail -n 3 "$work/$name.out"
  return $rc
}

# calls NAME PATTERN: how many of the stand-in's log lines match.
calls() {
  if [ -f "$work/$1.log" ]; then grep -E -c "$2" "$work/$1.log" || true; else echo 0; fi
}

# The collectives ccc runs (a built-in op). Joining ccc takes three uint8 all-gathers of
# libccc-nccl's own through NCCL (RankCard, ccc's unique id, the outcome), which user all-gathers
# (counts 1, 13 and 1000) are told apart from.
exchange='count=(264|128|4) datatype=1 '
ccc_collectives='ncclAllReduce .*op=[0-4]( |$)|ncclReduceScatter|ncclBroadcast|ncclBcast|ncclReduce |ncclAlltoAll'

run to_nccl CCC_NCCL_ROUTE=nccl CCC_NCCL_LIB="$fake_nccl" -- "$program_ccc" collectives 4 || fail "routed to NCCL"
[ "$(calls to_nccl 'ncclAllReduce')" -gt 1000 ] || fail "routed to NCCL: the stand-in saw too few allreduces"

run to_ccc CCC_NCCL_ROUTE=ccc CCC_NCCL_LIB="$fake_nccl" -- "$program_ccc" collectives 4 "$ccc_dtypes" || fail "routed to ccc"
[ "$(calls to_ccc "$ccc_collectives")" -eq 0 ] || fail "routed to ccc: ccc's collectives reached NCCL: $(grep -E -m3 "$ccc_collectives" "$work/to_ccc.log")"
[ "$(grep ncclAllGather "$work/to_ccc.log" | grep -c -v -E "$exchange")" -eq 0 ] ||
  fail "routed to ccc: user all-gathers reached NCCL"
[ "$(calls to_ccc "ncclAllGather .*($exchange)")" -eq $((2 * 3 * 4)) ] ||
  fail "routed to ccc: not three exchanges per rank for the communicator and its split child"
[ "$(calls to_ccc 'ncclSend')" -gt 0 ] && [ "$(calls to_ccc 'ncclGather')" -gt 0 ] || fail "routed to ccc: send and gather must go to NCCL"
[ "$(calls to_ccc 'ncclAllReduce .*op=([5-9]|[1-9][0-9]+)')" -gt 0 ] || fail "routed to ccc: PreMulSum allreduces must go to NCCL"

run auto CCC_NCCL_LIB="$fake_nccl" CCC_TOPO="$topology" CCC_DEBUG=INFO -- "$program_ccc" collectives 4 float32 || fail "routed by the model"
# On an H100 node the models send small allreduces to ccc and small broadcasts to NCCL.
grep -q "ccc-nccl rank 0 of 4: allreduce of up to 4 B -> ccc (predicted ccc" "$work/auto.out" ||
  fail "routed by the model: no logged decision for a 4-byte allreduce"
grep -q "ccc-nccl rank 0 of 4: broadcast of up to 4 B -> NCCL (predicted ccc" "$work/auto.out" ||
  fail "routed by the model: no logged decision for a 4-byte broadcast"
[ "$(grep -c "ccc-nccl rank 0 of 4: allreduce of up to 4 B -> " "$work/auto.out")" -eq 1 ] ||
  fail "routed by the model: a decision logged more than once per size class"
[ "$(calls auto 'ncclBroadcast')" -gt 0 ] && [ "$(calls auto 'ncclAllReduce .*op=[0-4]( |$)')" -eq 0 ] ||
  fail "routed by the model: broadcasts must reach NCCL, allreduces not"

run preload CCC_NCCL_ROUTE=ccc LD_PRELOAD="$shim" -- "$program_nccl" collectives 4 float32 || fail "LD_PRELOAD"
[ "$(calls preload "$ccc_collectives")" -eq 0 ] || fail "LD_PRELOAD: the calls went around libccc-nccl"

run first CCC_NCCL_ROUTE=ccc LD_LIBRARY_PATH="$work/first:$base_path" -- "$program_nccl" collectives 4 float32 ||
  fail "libccc-nccl as libnccl.so.2"
[ "$(calls first "$ccc_collectives")" -eq 0 ] || fail "libccc-nccl as libnccl.so.2: the calls went around it"

# Two simulated nodes of 4 ranks: allreduces whose count 4 divides run hierarchically (ccc within
# each node, NCCL between them on the rail of each local index: a quarter of the count); the rest
# goes to NCCL whole, as do the other collectives.
run nodes CCC_NCCL_ROUTE=ccc CCC_NCCL_RANKS_PER_NODE=4 CCC_NCCL_LIB="$fake_nccl" -- \
  "$program_ccc" collectives 8 "$ccc_dtypes" || fail "two nodes"
[ "$(calls nodes 'ncclAllReduce count=250 ')" -gt 0 ] || fail "two nodes: no allreduce between the nodes"
# (An integer average stays whole: averaging the nodes' truncated averages would truncate twice.)
[ "$(calls nodes 'ncclAllReduce count=1000 (datatype=[0-9]+ op=[0-3]|datatype=([6-9]|1[01]) op=4)( |$)')" -eq 0 ] ||
  fail "two nodes: a whole allreduce reached NCCL"
[ "$(calls nodes 'ncclAllGather count=1000 ')" -gt 0 ] || fail "two nodes: all-gathers must go to NCCL"

# A communicator made inside a group is NCCL's own (libccc-nccl cannot join ccc before NCCL has
# made it): every call on it goes to NCCL, through libccc-nccl's functions.
run group_init CCC_NCCL_ROUTE=ccc CCC_NCCL_LIB="$fake_nccl" -- "$program_ccc" group-init 4 float32 ||
  fail "a communicator made in a group"
[ "$(calls group_init 'ncclAllReduce .*op=[0-4]( |$)')" -gt 0 ] || fail "a communicator made in a group: not NCCL's"

# auto across the two nodes, by the model on a topology that describes them: where ccc's hierarchy
# is predicted faster (NVLink nodes) the allreduces cross as rail allreduces; where NCCL's ring is
# (four GPUs sharing one PCIe NIC), NCCL keeps them whole.
run nodes_auto CCC_NCCL_RANKS_PER_NODE=4 CCC_TOPO="$(dirname "$0")/nvlink-ring-4-2nodes.topo" CCC_DEBUG=INFO \
  CCC_NCCL_LIB="$fake_nccl" -- "$program_ccc" collectives 8 float32 || fail "auto across nodes"
grep -q "ccc-nccl rank 0 of 8: allreduce of up to 4 KiB -> ccc (predicted ccc" "$work/nodes_auto.out" ||
  fail "auto across nodes: no hierarchical allreduce logged"
[ "$(calls nodes_auto 'ncclAllReduce count=250 ')" -gt 0 ] || fail "auto across nodes: no rail allreduce"
run nodes_pcie CCC_NCCL_RANKS_PER_NODE=4 CCC_TOPO="$(dirname "$topology")/pcie-2nodes.topo" CCC_DEBUG=INFO \
  CCC_NCCL_LIB="$fake_nccl" -- "$program_ccc" collectives 8 float32 || fail "auto across PCIe nodes"
grep -q "ccc-nccl rank 0 of 8: allreduce of up to 4 KiB -> NCCL (predicted ccc" "$work/nodes_pcie.out" ||
  fail "auto across PCIe nodes: no decision for NCCL logged"
[ "$(calls nodes_pcie 'ncclAllReduce count=250 ')" -eq 0 ] || fail "auto across PCIe nodes: a rail allreduce ran"

# ncclCommInitAll: four ranks in one process, driven from one thread in a group.
for side in nccl ccc; do
  run one_process_$side CCC_NCCL_ROUTE=$side FAKE_CUDA_DEVICES=4 CCC_NCCL_LIB="$fake_nccl" -- \
    "$program_ccc" one-process 4 || fail "one process routed to $side"
done
[ "$(calls one_process_nccl 'ncclAllReduce|ncclAllGather')" -eq 8 ] || fail "one process: NCCL did not run the calls"
[ "$(calls one_process_ccc 'ncclAllReduce|ncclAllGather')" -eq 0 ] || fail "one process: ccc's calls reached NCCL"

for side in nccl ccc; do
  run abort_$side CCC_NCCL_ROUTE=$side CCC_NCCL_LIB="$fake_nccl" CCC_TIMEOUT=20 FAKE_NCCL_TIMEOUT=20 -- \
    "$program_ccc" abort 4 || fail "abort routed to $side"
done

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
