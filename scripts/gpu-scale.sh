#!/usr/bin/env bash
# Four and eight GPUs: gonccl's GPU tests, every example with N ranks
# and nccl-bench against nccl-tests with N GPUs, on a machine with N GPUs
# (4 or 8) and NCCL, from binaries built elsewhere (the GPU machine needs no Go):
#
#   scripts/gpu-scale.sh build          # here: cross-compile into .gpu/bin (scripts/gpu-check.sh build)
#   scripts/gpu-scale.sh run [OUT]      # there: everything, logs and a summary in OUT
#   scripts/gpu-scale.sh fake [N]       # here, no GPU: every example command line of
#                                       # `run`, as run, against the fake libraries on N
#                                       # fake GPUs (default 8), mpirun emulated
#                                       # (VARIANTS="default v230 vccl11", KEEP=DIR keeps the logs)
#
# N is GPUS, or every GPU nvidia-smi lists. Libraries checked, as
# scripts/gpu-check.sh does: the system NCCL, the NCCL of a PyTorch
# virtualenv's wheel (TORCH_VENV, default /opt/torch/.venv), VCCL_LIB (a folder
# with a VCCL build) and SRC_LIB (the folder of an NCCL built from source,
# e.g. by .gpu/build-nccl.sh); ONLY="system vccl" limits them. Benchmarks
# (BENCH=0 skips them) run once, on the system NCCL (nccl-tests is built
# against it) and VCCL_LIB where given: scripts/bench-vs-nccl-tests.sh with
# -g N (one process, N GPUs; its 8-byte latency loop stays at -g 2) and
# scripts/bench-multiprocess.sh with NP=N (one process per GPU, self-launched
# and under mpirun, against nccl-tests' MPI build, scripts/build-nccl-tests-mpi.sh).
# NCCL_NVLS_ENABLE=0 always: NVLink multicast stays off. Every step has its own
# time limit, so a hang costs that step; its exact command is in its log.
#
# The examples, with N ranks (every one checks every element itself):
#   allreduce     -np N (NCCL_COMM_ID), -np N -idfile, mpirun -np N, torchrun
#                 --nproc-per-node=N, N processes with torchrun's variables by hand
#   dataparallel  -np N, -gpus N (goroutines), mpirun -np N, torchrun
#   multigpu, split (2 communicators by parity; -ids: new ids), alltoallv (native
#                 where the library has ncclAlltoAllv; -grouped), sendrecv: -gpus N,
#                 goroutines in one process (no -np form)
#   captured      -np N, -gpus N, mpirun -np N
#   onesided      -gpus N, -np N, mpirun -np N (NCCL >= 2.29.2; older: the typed refusal).
#   faulttolerant 2 ranks by design (rank 1 killed, a replacement grown back):
#                 runs as in gpu-check.sh, on GPUs 0 and 1 only
#   withpython    2 ranks by design (a Go rank and a Python rank): gpu-check.sh runs it
#   nccl-bench    -g N and -np N, every operation, -d uint8 -c 1: every byte checked
set -uo pipefail
cd "$(dirname "$0")/.." || exit
export NCCL_NVLS_ENABLE=0

# run_example CMD...: one step, its command logged, ok or FAIL in the summary.
run_example() {
  echo "\$ $*" >>"$log"
  if timeout "${STEP:-150}" "$@" >>"$log" 2>&1; then echo "   ok:   $*" | tee -a "$summary"
  else echo "   FAIL: $* (exit $?)" | tee -a "$summary"; fi
}

# wrong LOG: nccl-bench's #wrong columns summed; fails where no row was
# checked or one was wrong.
wrong() { awk -f scripts/bench-wrong.awk "$1"; }

# bench_check CMD...: nccl-bench with -c 1; every checked result must be right.
bench_check() {
  echo "\$ $*" >>"$log"
  local tmp
  tmp=$(mktemp)
  timeout "${STEP:-150}" "$@" >"$tmp" 2>&1
  local rc=$?
  cat "$tmp" >>"$log"
  local r
  if r=$(wrong "$tmp") && [ $rc -eq 0 ]; then echo "   ok:   $* ($r)" | tee -a "$summary"
  else echo "   FAIL: $* (exit $rc; $r)" | tee -a "$summary"; fi
  rm -f "$tmp"
}

# examples LABEL ENV...: every example with N ranks on the library ENV... names.
# Uses E (the examples' folder), B (nccl-bench), I (nccl-info), N, LOGS.
examples() {
  local label=$1; shift
  log="$LOGS/examples-$label.log"
  : >"$log"
  local port=$((29500 + RANDOM % 400)) T="-timeout 60s"
  # newer CODE CMD...: needs NCCL >= CODE; older libraries must refuse it
  # with the typed "requires >= x" error.
  local code
  code=$(env "$@" "$I" 2>/dev/null | sed -n 's/.*(code \([0-9]*\)).*/\1/p' | head -1)
  # A library of that version lacking the calls (VCCL 2.29.2 has no
  # ncclPutSignal nor ncclCommRevoke) must refuse the same way: "refused".
  newer() {
    local need=$1; shift
    echo "\$ $*" >>"$log"
    local out rc
    out=$(timeout "${STEP:-150}" "$@" 2>&1); rc=$?
    echo "$out" >>"$log"
    if [ $rc -eq 0 ] && [ "${code:-0}" -ge "$need" ]; then echo "   ok:   $*" | tee -a "$summary"
    elif [ $rc -ne 0 ] && echo "$out" | grep -q "not supported by.*requires >="; then
      echo "   refused (NCCL code $code): $* ($(echo "$out" | grep -m1 -o '([0-9.]*; requires >= [0-9.]*)'))" | tee -a "$summary"
    else echo "   FAIL (exit $rc; want success, or the typed refusal): $*" | tee -a "$summary"; fi
  }
  echo "  examples, $N ranks ($label, NCCL code ${code:-?})" | tee -a "$summary"
  # One process per GPU, started by the example itself (NCCL_COMM_ID, rank 0
  # hosting the rendezvous), or the id through a file.
  run_example env "$@" "$E/allreduce" -np "$N" $T
  run_example env "$@" "$E/allreduce" -np "$N" $T -idfile "$LOGS/id-allreduce-$label-$$"
  run_example env "$@" "$E/dataparallel" -np "$N" $T
  run_example env "$@" "$E/captured" -np "$N" $T
  newer 22902 env "$@" "$E/onesided" -np "$N" $T
  # One goroutine per GPU in one process.
  run_example env "$@" "$E/dataparallel" -gpus "$N" $T
  run_example env "$@" "$E/multigpu" -gpus "$N" $T
  run_example env "$@" "$E/split" -gpus "$N" $T
  run_example env "$@" "$E/split" -gpus "$N" -ids $T
  run_example env "$@" "$E/alltoallv" -gpus "$N" $T
  run_example env "$@" "$E/alltoallv" -gpus "$N" -grouped $T
  run_example env "$@" "$E/sendrecv" -gpus "$N" $T
  run_example env "$@" "$E/captured" -gpus "$N" $T
  newer 22902 env "$@" "$E/onesided" -gpus "$N" $T
  newer 22902 env "$@" "$E/faulttolerant" $T # 2 ranks by design
  # Under mpirun: the library's variables passed with -x.
  if command -v mpirun >/dev/null; then
    local xs=() kv ex
    for kv in "$@"; do xs+=(-x "${kv%%=*}"); done
    for ex in allreduce dataparallel captured; do
      port=$((port + 1))
      run_example env "$@" mpirun --allow-run-as-root -np "$N" --bind-to none -x NCCL_NVLS_ENABLE "${xs[@]}" \
        -x NCCL_COMM_ID=127.0.0.1:$port "$E/$ex" $T
    done
    port=$((port + 1))
    newer 22902 env "$@" mpirun --allow-run-as-root -np "$N" --bind-to none -x NCCL_NVLS_ENABLE "${xs[@]}" \
      -x NCCL_COMM_ID=127.0.0.1:$port "$E/onesided" $T
  else
    echo "   (no mpirun: its forms not run)" | tee -a "$summary"
  fi
  # torchrun's variables by hand: ranks 1..N-1 in the background, rank 0 in front.
  port=$((port + 1))
  local env="MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=$N"
  run_example env "$@" bash -c "for r in \$(seq 1 $((N - 1))); do $env RANK=\$r LOCAL_RANK=\$r $E/allreduce $T & done
$env RANK=0 LOCAL_RANK=0 $E/allreduce $T; rc=\$?; for p in \$(jobs -p); do wait \$p || rc=1; done; exit \$rc"
  if [ -n "${TORCHRUN:-}" ]; then
    port=$((port + 1))
    run_example env "$@" "$TORCHRUN" --no-python --nproc-per-node="$N" --master-port=$port "$E/allreduce" $T
    port=$((port + 1))
    run_example env "$@" "$TORCHRUN" --no-python --nproc-per-node="$N" --rdzv-backend=c10d \
      --rdzv-endpoint=127.0.0.1:$port "$E/dataparallel" $T
  fi
  # nccl-bench, every byte checked: N GPUs in one process, and N processes.
  local op CHECK="-d uint8 -c 1 -b 8 -e ${CHECK_MAX:-16M} -f 32 -n 5 -w 1"
  for op in all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv alltoallv; do
    bench_check env "$@" "$B" -g "$N" -op $op $CHECK
  done
  for op in all_reduce alltoallv sendrecv; do
    bench_check env "$@" "$B" -np "$N" -op $op $CHECK
  done
  grep -h "checksum\|correct\|identical\|faulttolerant:\|onesided:\|captured:\|split:" "$log" | grep -v 'rank [1-9][0-9]*/' | sort -u | sed 's/^/      /' >>"$summary"
}

case "${1:-}" in
build)
  exec scripts/gpu-check.sh build
  ;;
run)
  OUT=${2:-${OUT:-/tmp/gonccl-scale}}
  mkdir -p "$OUT/logs"
  LOGS=$OUT/logs
  summary="$OUT/summary.txt"
  : >"$summary"
  trap 'exit 124' TERM INT
  date -u >>"$summary"
  nvidia-smi -L >>"$summary" 2>&1
  N=${GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
  echo "N=$N GPUs" | tee -a "$summary"
  [ "$N" -ge 2 ] 2>/dev/null || { echo "need at least 2 GPUs (GPUS=$N)" | tee -a "$summary"; exit 1; }
  # The GPU tests use every visible GPU (some: 2 of them); GPUS < the count
  # limits them with CUDA_VISIBLE_DEVICES.
  vis=()
  if [ "$N" -lt "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')" ]; then
    vis=(CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((N - 1)))")
  fi
  E=.gpu/bin/examples B=.gpu/bin/nccl-bench I=.gpu/bin/nccl-info
  VENV=${TORCH_VENV:-/opt/torch/.venv}
  WHEEL=$(ls -d "$VENV"/lib/python3*/site-packages/nvidia/nccl/lib 2>/dev/null | head -1)
  TORCHRUN=
  [ -x "$VENV/bin/torchrun" ] && "$VENV/bin/torchrun" --help 2>&1 | grep -q -- --nproc-per-node && TORCHRUN=$VENV/bin/torchrun
  check() { # check LABEL ENV...: nccl-info, the GPU tests one at a time, the examples
    local label=$1; shift
    echo "== $label" | tee -a "$summary"
    env "${vis[@]}" "$@" "$I" >"$LOGS/nccl-info-$label.txt" 2>&1
    grep -E "file|found by|version" "$LOGS/nccl-info-$label.txt" | head -4 | sed 's/^/   /' | tee -a "$summary"
    local tl="$LOGS/test-$label.log" one rc=0
    : >"$tl"
    for one in $(.gpu/bin/nccl-gpu.test -test.list 'TestGPU' | grep -vE "${SKIP:-^$}"); do
      echo "\$ env ${vis[*]} $* .gpu/bin/nccl-gpu.test -test.v -test.run ^$one\$ -test.count=1 -test.timeout=240s" >>"$tl"
      timeout 300 env "${vis[@]}" "$@" .gpu/bin/nccl-gpu.test -test.v -test.run "^$one\$" -test.count=1 -test.timeout=240s >>"$tl" 2>&1 ||
        { rc=1; grep -q -- "--- FAIL: $one" "$tl" || echo "--- FAIL: $one (no verdict: crashed or timed out)" >>"$tl"; }
    done
    echo "   GPU tests: exit $rc, $(grep -cE -- '(^|[^ ])--- PASS: TestGPU[A-Za-z0-9_]+ \(' "$tl") passed, $(grep -c -- '--- FAIL' "$tl") failed, $(grep -cE -- '(^|[^ ])--- SKIP: TestGPU[A-Za-z0-9_]+ \(' "$tl") skipped" | tee -a "$summary"
    grep -E -- "(^|[^ ])--- (PASS|FAIL|SKIP): TestGPU[A-Za-z0-9_]+ \(|checked|GPUs\)?$|ncclAlltoAllv|watchdog:|peer dies|fault rounds" "$tl" | sed 's/^/      /' >>"$summary"
    examples "$label" "${vis[@]}" "$@"
  }
  want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
  want system && check system
  [ -n "$WHEEL" ] && want wheel && check wheel GONCCL_NCCL_LIB="$WHEEL"
  [ -n "${VCCL_LIB:-}" ] && want vccl && check vccl GONCCL_NCCL_LIB="$VCCL_LIB"
  [ -n "${SRC_LIB:-}" ] && want src && check src GONCCL_NCCL_LIB="$SRC_LIB"
  if [ "${BENCH:-1}" != 0 ]; then
    echo "== benchmarks, N=$N (logs in $OUT/bench-g$N, $OUT/bench-np$N)" | tee -a "$summary"
    echo "\$ ARGS=\"-b 8 -e 1G -f 4 -g $N -n 50 -w 5 -c 0\" REPS=3 scripts/bench-vs-nccl-tests.sh $OUT/bench-g$N" >>"$summary"
    ARGS="-b 8 -e 1G -f 4 -g $N -n 50 -w 5 -c 0" REPS=3 timeout 3600 env "${vis[@]}" \
      bash scripts/bench-vs-nccl-tests.sh "$OUT/bench-g$N" >"$LOGS/bench-g$N.log" 2>&1
    echo "   exit $?" | tee -a "$summary"
    sed 's/^/   /' "$OUT/bench-g$N/ratios.txt" >>"$summary" 2>/dev/null
    echo "\$ NP=$N ARGS=\"-b 8 -e 1G -f 4 -n 50 -w 5 -c 0\" scripts/bench-multiprocess.sh $OUT/bench-np$N" >>"$summary"
    NP=$N ARGS="-b 8 -e 1G -f 4 -n 50 -w 5 -c 0" timeout 3600 env "${vis[@]}" \
      bash scripts/bench-multiprocess.sh "$OUT/bench-np$N" >"$LOGS/bench-np$N.log" 2>&1
    echo "   exit $?" | tee -a "$summary"
    sed 's/^/   /' "$OUT/bench-np$N/summary.txt" >>"$summary" 2>/dev/null
  fi
  tar czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null
  echo "== summary: $(grep -c 'FAIL' "$summary") failures" | tee -a "$summary"
  cat "$summary"
  ;;
fake)
  # The same example steps against the fakes (nccltest/csrc/*.c) on N fake GPUs:
  # proves every command line. mpirun is emulated (Open MPI's variables, -x
  # passed on) where no mpirun is installed.
  N=${2:-8}
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  go run ./cmd/nccl-fakes -o "$work/fakes" >/dev/null || exit 1
  mkdir -p "$work/bin/examples" "$work/logs"
  CGO_ENABLED=0 go build -o "$work/bin/examples/" ./examples/... || exit 1
  CGO_ENABLED=0 go build -o "$work/bin/" ./cmd/nccl-bench ./cmd/nccl-info || exit 1
  if ! command -v mpirun >/dev/null; then
    cat >"$work/bin/mpirun" <<'EOF'
#!/usr/bin/env bash
# mpirun's flags the script uses; each rank gets Open MPI's variables.
np=1
while [ $# -gt 0 ]; do
  case $1 in
  --allow-run-as-root) shift ;;
  --bind-to) shift 2 ;;
  -np) np=$2; shift 2 ;;
  -x) case $2 in *=*) export "${2?}" ;; esac; shift 2 ;;
  *) break ;;
  esac
done
pids=()
for r in $(seq 0 $((np - 1))); do
  OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$np OMPI_COMM_WORLD_LOCAL_RANK=$r OMPI_COMM_WORLD_LOCAL_SIZE=$np "$@" &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
exit $rc
EOF
    chmod +x "$work/bin/mpirun"
    export PATH=$work/bin:$PATH
  fi
  export GONCCL_CUDART_LIB=$work/fakes/cudart FAKECUDA_DEVICES=$N NCCL_COMM_ID=
  E=$work/bin/examples B=$work/bin/nccl-bench I=$work/bin/nccl-info LOGS=$work/logs CHECK_MAX=64K STEP=120
  TORCHRUN=$(command -v torchrun || true) # an old one (--nproc_per_node only) is not used
  [ -n "$TORCHRUN" ] && ! "$TORCHRUN" --help 2>&1 | grep -q -- --nproc-per-node && TORCHRUN=
  summary=$work/summary.txt
  : >"$summary"
  # default: NCCL 2.28.3 (onesided, faulttolerant: the typed refusal);
  # v230: 2.30.7 (all run); vccl11: VCCL's native ncclAlltoAllv.
  for v in ${VARIANTS:-default v230 vccl11}; do
    examples "fake-$v" GONCCL_NCCL_LIB="$work/fakes/$v"
  done
  fails=$(grep -c 'FAIL' "$summary")
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp -r "$work/logs" "$summary" "$KEEP/"; fi
  cat "$summary"
  echo "== $N fake GPUs: $fails failures"
  [ "$fails" -eq 0 ]
  ;;
*)
  echo "usage: $0 build | run [OUT] | fake [N]" >&2
  exit 2
  ;;
esac
