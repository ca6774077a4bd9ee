#!/usr/bin/env bash
# The demo: compile every shipped schedule to CUDA and run it on the host backend, checking every
# element against a reference. usage: scripts/demo.sh CCC RANKS COUNT
set -euo pipefail
ccc=$1 ranks=$2 count=$3
out=build/demo
mkdir -p "$out"
for sched in schedules/*.sched; do
  name=$(basename "$sched" .sched)
  if ! "$ccc" check "$sched" --ranks "$ranks" >/dev/null 2>"$out/$name.check.txt"; then
    echo "== $name: not valid at N=$ranks: $(head -n 1 "$out/$name.check.txt")"
    continue
  fi
  "$ccc" compile "$sched" --ranks "$ranks" --emit cu -o "$out/$name.cu"
  echo "== $name: $out/$name.cu"
  "$ccc" run "$sched" --ranks "$ranks" --count "$count" --backend host
done
