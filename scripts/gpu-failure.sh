#!/usr/bin/env bash
# The failure-semantics checks on a machine with GPUs (4 for the 2- and
# 4-rank runs), from binaries built elsewhere:
#
#   scripts/gpu-failure.sh build                    # here: cross-compile into .gpu/bin
#   scripts/gpu-failure.sh run OUT [LABEL=DIR ...]  # there: every library, logs and a summary in OUT
#
# Each LABEL=DIR names a libnccl folder (an empty DIR: the system's, through
# the search). Per library, three runs in a row of TestGPUGroupFailures,
# TestGPUInitRankInsideGroup, TestGPUAbortRacingGroups
# (GONCCL_GPU_ABORT_ROUNDS, default 10) and TestGPUFaultAbortWatchdog
# (GONCCL_GPU_WATCHDOG_SECONDS, default 4); the examples that crashed or hung
# before (sendrecv, alltoallv, on every GPU) three times each; and, unless
# REPRO=0, the C programs of scripts/repro/ (built with gcc against the
# system's nccl.h, run against the library), which tell NCCL's behaviour
# apart from gonccl's. SUB, a -test.run subtest pattern, limits the tests'
# cases: SUB=^4_ranks runs only the 4-rank ones (the 2-rank cases proven on a
# 2-GPU machine). NCCL_NVLS_ENABLE=0 always.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0

case "${1:-}" in
build)
  set -e
  mkdir -p .gpu/bin/examples
  export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
  go test -tags gpu -ldflags='-s -w' -c -o .gpu/bin/nccl-gpu.test .
  go build -ldflags='-s -w' -o .gpu/bin/nccl-info ./cmd/nccl-info
  go build -ldflags='-s -w' -o .gpu/bin/examples/ ./examples/sendrecv ./examples/alltoallv
  ls -la .gpu/bin
  ;;
run)
  OUT=${2:?usage: $0 run OUT [LABEL=DIR ...]}
  shift 2
  mkdir -p "$OUT"
  summary="$OUT/failure-summary.txt"
  LOGS="$OUT/failure-logs"
  mkdir -p "$LOGS"
  : >"$summary"
  { date -u; nvidia-smi -L; } >>"$summary" 2>&1
  R=$(mktemp -d)
  [ "${REPRO:-1}" = 0 ] || for p in nccl-group-poll nccl-group-abort nccl-abort-race nccl-alltoallv-procs; do
    gcc -O2 -o "$R/$p" "scripts/repro/$p.c" -I/usr/local/cuda/include -L/usr/local/cuda/lib64 -lnccl -lcudart -lpthread -ldl \
      2>>"$LOGS/repro-build.txt" || echo "repro $p: build failed" | tee -a "$summary"
  done
  export GONCCL_GPU_ABORT_ROUNDS=${GONCCL_GPU_ABORT_ROUNDS:-10} GONCCL_GPU_WATCHDOG_SECONDS=${GONCCL_GPU_WATCHDOG_SECONDS:-4}
  for spec in "$@"; do
    label=${spec%%=*} dir=${spec#*=}
    env=()
    if [ -n "$dir" ]; then env=(GONCCL_NCCL_LIB="$dir" LD_LIBRARY_PATH="$dir:${LD_LIBRARY_PATH:-}"); fi
    echo "== $label $(env "${env[@]}" .gpu/bin/nccl-info 2>/dev/null | grep -m1 -i version)" | tee -a "$summary"
    for t in TestGPUGroupFailures TestGPUInitRankInsideGroup TestGPUAbortRacingGroups TestGPUFaultAbortWatchdog; do
      verdicts=""
      for rep in 1 2 3; do
        log="$LOGS/$label-$t-$rep.log"
        if timeout 300 env "${env[@]}" .gpu/bin/nccl-gpu.test -test.v -test.run "^$t\$${SUB:+/$SUB}" -test.count=1 -test.timeout=280s >"$log" 2>&1; then
          verdicts="$verdicts pass"
          # With SUB, how many cases ran: none matching would pass vacuously.
          [ -n "${SUB:-}" ] && verdicts="$verdicts($(grep -c -- "--- PASS: $t/" "$log") cases)"
        elif grep -q -- "--- SKIP: $t" "$log"; then verdicts="$verdicts skip"
        elif grep -q -- "--- FAIL: $t" "$log"; then verdicts="$verdicts FAIL"
        else verdicts="$verdicts CRASH/TIMEOUT"; fi
      done
      echo "   $t:$verdicts" | tee -a "$summary"
      grep -hE "rounds:|watchdog:" "$LOGS/$label-$t-"*.log | sed 's/^/      /' | head -12 >>"$summary"
    done
    for ex in "sendrecv" "alltoallv" "alltoallv -grouped"; do
      verdicts=""
      for rep in 1 2 3; do
        log="$LOGS/$label-example-${ex// /}-$rep.log"
        if timeout 120 env "${env[@]}" .gpu/bin/examples/$ex -timeout 45s >"$log" 2>&1; then verdicts="$verdicts ok"
        else verdicts="$verdicts FAIL($?)"; fi
      done
      echo "   example $ex:$verdicts" | tee -a "$summary"
    done
    [ "${REPRO:-1}" = 0 ] && continue
    for args in "own 300" "locked 300" "all 300" "all 300" "all 300"; do
      log="$LOGS/$label-repro-poll-${args// /-}.log"
      timeout 120 env "${env[@]}" "$R/nccl-group-poll" $args >"$log" 2>&1
      echo "   repro nccl-group-poll $args: exit $? $(grep -m1 -E 'terminate|OK|FAILED' "$log")" | tee -a "$summary"
    done
    for args in "safe nonblocking 10 4" "race nonblocking 10 4" "race blocking 10 4" "ingroup nonblocking 3 4"; do
      log="$LOGS/$label-repro-abort-${args// /-}.log"
      timeout 150 env "${env[@]}" "$R/nccl-group-abort" $args >"$log" 2>&1
      echo "   repro nccl-group-abort $args: exit $? $(tail -1 "$log")" | tee -a "$summary"
    done
    # VCCL's native alltoallv across processes (exit 2: the library has none).
    np=$(nvidia-smi -L | grep -c '^GPU ')
    for args in "nobarrier" "skew" "skew barrier" "skew sync"; do
      log="$LOGS/$label-repro-alltoallv-${args// /-}.log"
      timeout 150 env "${env[@]}" "$R/nccl-alltoallv-procs" "$np" $args >"$log" 2>&1
      echo "   repro nccl-alltoallv-procs $np $args: exit $? $(tail -1 "$log")" | tee -a "$summary"
    done
  done
  tar czf "$OUT/failure-logs.tar.gz" -C "$OUT" failure-logs && rm -rf "$LOGS"
  cat "$summary"
  ;;
*)
  echo "usage: $0 build | run OUT [LABEL=DIR ...]" >&2
  exit 2
  ;;
esac
