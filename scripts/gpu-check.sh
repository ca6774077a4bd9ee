#!/usr/bin/env bash
# The GPU check, run on the GPU machine from the folder `make gpu-bundle` builds (it is copied to
# gpu-bundle/gpu-check.sh and runs the binaries in gpu-bundle/bin/; nothing is built here):
#   1. every test of the CUDA backend (ccc_gpu_tests), one part per test, among them two rank
#      processes on the one device through cccCommInitRank on backend cuda
#      (CudaMultiProcess.TwoRanksOnOneDevice);
#   2. ccc-bench checked: allreduce ring with every type and op, every other collective;
#   3. a trace of one run of each shipped schedule ($OUT/trace-<schedule>.json, docs/tracing.md);
#   4. ccc-bench timed, 8 B to 1 GiB, eager and replayed from a CUDA graph, against a
#      device-to-device copy of the bytes the schedule moves through HBM;
#   5. the cost model's constants this GPU can give (launch, graph replay, memory, one channel):
#      ccc-bench --calibrate writes $OUT/calibration.txt (else beside the logs), which
#      `ccc tune --calibration` and $CCC_CALIBRATION read (docs/cost_model.md, "Calibration");
#      then again with programmatic dependent launch off ($OUT/calibration-no-pdl.txt);
#   6. ccc.torch's tests with this machine's Python and torch, on CPU tensors and then on CUDA
#      ones, two rank processes on the one GPU (python/check.sh: SKIP when the bundle's
#      extension, built for one CPython version, does not load here).
# A failing part is reported and the check goes on; the exit code is 0 only if every part passed.
# One table at the end; with OUT set, each row also goes to $OUT/gpu-check.tsv as its part ends
# (logs in $OUT/gpu-check/, else in logs/ beside this script). Without a GPU it says so in one
# line and exits 1.
# usage: gpu-bundle/gpu-check.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$here/bin
logs=${OUT:+$OUT/gpu-check}
logs=${logs:-$here/logs}
# Every part ends by this many seconds (cut short: TIMEOUT; not started: NOT RUN), so that the
# whole check stays under 8 minutes.
deadline=${CCC_CHECK_SECONDS:-460}
ranks=8
export CCC_CACHE_DIR=${TMPDIR:-/tmp}/ccc-gpu-check-jit  # not under $OUT: only logs go back

# NVRTC is the machine's own, opened by ccc with dlopen (nvrtc_library.h): the toolkit's under
# $CUDA_HOME or /usr/local/cuda, the loader's path, and, for the Python module, its wheels. The
# bench binaries do not look into Python's wheels: where no toolkit has NVRTC, point them at a
# wheel's (PyTorch brings nvidia-cuda-nvrtc) through CCC_NVRTC.
if [ -z "${CCC_NVRTC:-}" ] && ! ls "${CUDA_HOME:-/usr/local/cuda}"/lib64/libnvrtc.so.1[23] >/dev/null 2>&1; then
  for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    for lib in "$site"/nvidia/cu13/lib/libnvrtc.so.13 "$site"/nvidia/cuda_nvrtc/lib/libnvrtc.so.12; do
      if [ -z "${CCC_NVRTC:-}" ] && [ -e "$lib" ]; then export CCC_NVRTC=$lib; fi
    done
  done
fi

if [ ! -x "$bin/ccc-bench" ]; then
  echo "gpu-check: no $bin/ccc-bench: build the bundle (make gpu-bundle) and run gpu-bundle/gpu-check.sh"
  exit 1
fi
if ! device=$("$bin/ccc-bench" --probe 2>&1); then
  case $device in
    *"error while loading shared libraries"*) echo "gpu-check: cannot start ccc-bench: ${device//$'\n'/ }" ;;
    *) echo "gpu-check: no GPU: ${device//$'\n'/ }" ;;
  esac
  exit 1
fi
echo "gpu-check: $device"
mkdir -p "$logs"

# The table's rows: part <TAB> result <TAB> seconds <TAB> detail. Each goes to
# $OUT/gpu-check.tsv as soon as its part ends, so a check cut short (the device's time is up)
# still brings back every row it finished.
rows=()
tsv=${OUT:+$OUT/gpu-check.tsv}
[ -z "$tsv" ] || printf '%s\t%s\t%s\t%s\n' part result seconds detail >"$tsv"
row() {
  rows+=("$1")
  [ -z "$tsv" ] || printf '%s\n' "$1" >>"$tsv"
}
row "device"$'\tPASS\t0\t'"$device"
failed=0

# part NAME TIMEOUT DETAIL_FN COMMAND...: runs COMMAND with its output in $logs/NAME.log (NAME
# with every character but letters, digits, '.' and '-' made '_') and adds a row; DETAIL_FN (or -)
# summarises the log for the table.
part() {
  local name=$1 limit=$2 detail_fn=$3 start=$SECONDS result detail="" log
  shift 3
  log=$logs/$(tr -c 'A-Za-z0-9.\n-' '_' <<<"$name").log
  if [ "$SECONDS" -ge "$deadline" ]; then
    row "$name"$'\tNOT RUN\t0\tno time left'
    failed=1
    return
  fi
  [ "$limit" -le $((deadline - SECONDS)) ] || limit=$((deadline - SECONDS))
  timeout -k 10 "$limit" "$@" >"$log" 2>&1
  case $? in
    0) result=PASS ;;
    124) result=TIMEOUT ;;
    *) result=FAIL ;;
  esac
  if [ "$result" = PASS ] && grep -q '^\[  SKIPPED \]' "$log"; then result=SKIP; fi
  [ "$result" = PASS ] || [ "$result" = SKIP ] || failed=1
  [ "$detail_fn" != - ] && detail=$("$detail_fn" "$log")
  [ "$result" != TIMEOUT ] || detail="stopped after ${limit}s; $detail"
  [ "$result" = PASS ] || [ -n "$detail" ] || detail=$(grep -m1 -iE 'error|failure|skipped' -A2 "$log" | tr '\n' ' ' | cut -c1-160)
  row "$name"$'\t'"$result"$'\t'$((SECONDS - start))$'\t'"$detail"
  printf '%-44s %-7s %4ds\n' "$name" "$result" $((SECONDS - start))
}

# ccc-bench's footer: wrong values (where it checked), then the smallest size's latency and the
# largest's bandwidth.
bench_detail() {
  {
    grep -q ' N/A ' "$1" || sed -n 's/^# Out of bounds values : \([0-9]*\).*/wrong \1;/p' "$1"
    sed -n -e 's/^# Latency at \(.*\)/\1;/p' -e 's/^# Bandwidth at \(.*\)/\1/p' "$1"
  } | tr '\n' ' '
}

tests=$("$bin/ccc_gpu_tests" --gtest_list_tests | awk '/^[^ ]/ { suite = $1 } /^  / { print suite $1 }')
[ -n "$tests" ] || part "test:list the tests" 60 - false
for t in $tests; do
  part "test:$t" 240 - "$bin/ccc_gpu_tests" --gtest_filter="$t" --gtest_brief=1
done

bench=("$bin/ccc-bench" --backend cuda --ranks "$ranks")
part "check:allreduce ring, every type and op" 120 bench_detail \
  "${bench[@]}" --algo ring -d all -o all -b 8 -e 1M -f 64 -n 1 -w 0 -c 1
for coll in reduce_scatter allgather broadcast reduce alltoall; do
  part "check:$coll ring" 60 bench_detail "${bench[@]}" --collective "$coll" -b 8 -e 64M -f 16 -n 2 -w 1 -c 1
done
# One traced run (1 MiB) of each shipped schedule: $OUT/trace-<schedule>.json (else beside the
# logs), for Perfetto or `ccc trace-summary`. tests/gpu_check checks this list against schedules/.
traces=${OUT:-$logs}
for entry in allreduce:ring allreduce:twoshot allreduce:oneshot allreduce:butterfly allreduce:tree \
             allreduce:dbtree reduce_scatter:ring_reduce_scatter allgather:ring_allgather \
             broadcast:ring_broadcast reduce:ring_reduce alltoall:alltoall_direct alltoall:alltoall_bruck; do
  part "trace:${entry#*:}" 60 - "${bench[@]}" --collective "${entry%%:*}" --algo "${entry#*:}" \
    -b 1M -e 1M -n 1 -w 0 -c 1 --trace "$traces/trace-${entry#*:}.json"
done
for algo in ring twoshot oneshot; do
  part "time:allreduce $algo f32, 8 B - 1 GiB" 120 bench_detail \
    "${bench[@]}" --algo "$algo" -b 8 -e 1G -f 2 -n 20 -w 5 -G 5 -c 0 --baseline
done
calibration_detail() { sed -n 's/^gpus //p' "$1"; }
part "calibrate:launch, graph, memory, channel" 60 calibration_detail \
  "$bin/ccc-bench" --calibrate "${OUT:-$logs}/calibration.txt"
# Again with programmatic dependent launch off (docs/runtime.md): its `launch` against the one
# above is what PDL hides of a back-to-back eager launch on this GPU.
part "calibrate:again with CCC_PDL=0" 60 calibration_detail \
  env CCC_PDL=0 "$bin/ccc-bench" --calibrate "${OUT:-$logs}/calibration-no-pdl.txt"
part "python:ccc.torch tests" 180 - "$here/python/check.sh" host
part "python:CUDA ranks from Python" 180 - "$here/python/check.sh" cuda

table() {
  printf '%s\t%s\t%s\t%s\n' part result seconds detail
  printf '%s\n' "${rows[@]}"
}
echo
echo "gpu-check on $device, ${SECONDS}s:"
table | awk -F'\t' '{ row[NR] = $0; if (length($1) > w) w = length($1) }
  END { for (i = 1; i <= NR; ++i) { split(row[i], f, "\t"); printf "%-" w "s  %-7s %7s  %s\n", f[1], f[2], f[3], f[4] } }'
[ "$failed" = 0 ] && echo "gpu-check: every part passed" || echo "gpu-check: FAILED (logs in $logs)"
exit "$failed"
