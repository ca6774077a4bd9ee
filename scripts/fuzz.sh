#!/usr/bin/env bash
# Runs the parser fuzzer for a bounded time, seeded with the shipped, the bad and the lit schedules.
# usage: scripts/fuzz.sh BUILD_DIR SECONDS
set -euo pipefail
build=$1 seconds=$2
fuzzer=$(find "$build" -type f -name fuzz_parser -perm -u+x | head -n 1)
[[ -n $fuzzer ]] || { echo "fuzz.sh: no fuzz_parser under $build" >&2; exit 1; }
corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp schedules/*.sched tests/bad/*.sched tests/lit/*/*.sched "$corpus"/ 2>/dev/null || true
"$fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=30 -rss_limit_mb=2048 \
  -print_final_stats=1 "$corpus"
