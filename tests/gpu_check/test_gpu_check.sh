#!/usr/bin/env bash
# gpu-check.sh here, with this build's binaries laid out as `make gpu-bundle` lays them out:
#   1. without a GPU (the driver made unloadable, so also on a machine with one): one line that
#      says so, a non-zero exit, within seconds;
#   2. against the recording stand-in for libcuda with no time left (CCC_CHECK_SECONDS=0): every
#      part reported NOT RUN in the table and in $OUT/gpu-check.tsv (a trace part for each shipped
#      schedule among them), a non-zero exit.
# usage: test_gpu_check.sh GPU_CHECK_SH CCC_BENCH CCC_GPU_TESTS FAKE_LIBCUDA WORK_DIR
set -euo pipefail
script=$1 bench=$2 tests=$3 fake=$4 work=$5
rm -rf "$work"
mkdir -p "$work/bundle/bin" "$work/out"
cp "$script" "$work/bundle/gpu-check.sh"
ln -s "$bench" "$work/bundle/bin/ccc-bench"
ln -s "$tests" "$work/bundle/bin/ccc_gpu_tests"

output="" code=0
fail() { echo "FAIL: $*"; echo "--- output:"; echo "$output"; exit 1; }
check() {  # check LIBCUDA [ENV=VALUE...]: runs the check, sets output and code
  local libcuda=$1
  shift
  set +e
  output=$(env CCC_LIBCUDA="$libcuda" OUT="$work/out" "$@" timeout 60 bash "$work/bundle/gpu-check.sh" 2>&1)
  code=$?
  set -e
  [ "$code" -ne 124 ] || fail "still running after 60 s"
}

start=$SECONDS
check /nonexistent
[ "$code" -ne 0 ] || fail "exit code 0 without a GPU"
[ $((SECONDS - start)) -le 10 ] || fail "took $((SECONDS - start))s, not seconds"
[ "$(wc -l <<<"$output")" -eq 1 ] || fail "more than one line"
grep -q '^gpu-check: no GPU: no CUDA device' <<<"$output" || fail "the line does not say there is no GPU"
echo "ok without a GPU: exit $code after $((SECONDS - start))s: $output"

check "$fake" CCC_CHECK_SECONDS=0
[ "$code" -ne 0 ] || fail "exit code 0 with parts not run"
tsv=$work/out/gpu-check.tsv
[ -f "$tsv" ] || fail "no $tsv"
[ "$(head -1 "$tsv")" = $'part\tresult\tseconds\tdetail' ] || fail "the TSV has no header"
grep -q $'^test:CudaCommunicator.GraphCaptureReplayedAHundredTimes\tNOT RUN\t' "$tsv" || fail "no row for a GPU test"
grep -q $'^time:allreduce ring f32, 8 B - 1 GiB\tNOT RUN\t' "$tsv" || fail "no row for the timing"
grep -q $'^device\tPASS\t0\tFake H100, sm_90' "$tsv" || fail "no row for the device"
grep -q $'^python:ccc.torch tests\tNOT RUN\t' "$tsv" || fail "no row for the Python tests"
grep -q $'^calibrate:launch, graph, memory, channel\tNOT RUN\t' "$tsv" || fail "no row for the calibration"
grep -q $'^calibrate:again with CCC_PDL=0\tNOT RUN\t' "$tsv" || fail "no row for the calibration without PDL"
grep -q $'^python:CUDA ranks from Python\tNOT RUN\t' "$tsv" || fail "no row for the Python CUDA tests"
# A trace part for every shipped schedule, and for nothing else.
schedules=$(cd "$(dirname "$0")/../../schedules" && pwd)
for sched in "$schedules"/*.sched; do
  name=$(basename "$sched" .sched)
  grep -q $'^trace:'"$name"$'\tNOT RUN\t' "$tsv" || fail "no trace part for the shipped schedule $name"
done
[ "$(grep -c '^trace:' "$tsv")" -eq "$(ls "$schedules"/*.sched | wc -l)" ] || fail "trace parts for schedules not shipped"
[ "$(grep -c 'NOT RUN' "$tsv")" -eq "$(($(wc -l <"$tsv") - 2))" ] || fail "a part ran with no time left"
grep -q '^gpu-check: FAILED' <<<"$output" || fail "no verdict"
echo "ok with no time left: exit $code, $(($(wc -l <"$tsv") - 2)) parts in the table"
