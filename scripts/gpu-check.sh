#!/usr/bin/env bash
# Runs gonccl's GPU checks on a machine with GPUs and NCCL, from binaries built
# elsewhere (the GPU machine needs no Go):
#
#   scripts/gpu-check.sh build        # here: cross-compile into .gpu/bin
#   scripts/gpu-check.sh run [OUT]    # there: run everything, logs and a summary in OUT
#
# Libraries checked: the system NCCL, the NCCL of a PyTorch virtualenv
# (TORCH_VENV, default /opt/torch/.venv) and, when VCCL_LIB names a folder with a
# VCCL build, that too, and when SRC_LIB names the folder of an NCCL built from
# source (BUILD_NCCL=v2.30.7-1 builds one with .gpu/build-nccl.sh, beside the
# other checks), that too. NCCL_NVLS_ENABLE=0 always: NVLink multicast stays off.
#
# On a machine of one GPU, the checks of two ranks run where the library lets
# ranks share a GPU (NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1: the tests
# get GONCCL_GPU_RANKS=2, the launched examples share GPU 0 through
# launch.Job.Device); with older libraries they are skipped and say so. On a
# machine of more GPUs, CUDA_VISIBLE_DEVICES=0,1 keeps the checks at 2 ranks.
# TESTS (a -test.run pattern, default TestGPU) picks the GPU tests that run;
# ONLY (below) picks the libraries; EXAMPLES=0 skips the examples.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0

case "${1:-}" in
build)
  set -e
  mkdir -p .gpu/bin
  # -s -w: no symbol table or DWARF (stack traces keep their names), so
  # that the binaries travel in less than half the space.
  export CGO_ENABLED=0 GOOS=linux GOARCH=amd64
  go test -tags gpu -ldflags='-s -w' -c -o .gpu/bin/nccl-gpu.test .
  go build -ldflags='-s -w' -o .gpu/bin/nccl-info ./cmd/nccl-info
  go build -ldflags='-s -w' -o .gpu/bin/nccl-bench ./cmd/nccl-bench
  go build -ldflags='-s -w' -o .gpu/bin/nonblocking-go ./scripts/nonblocking-go
  mkdir -p .gpu/bin/examples
  go build -ldflags='-s -w' -o .gpu/bin/examples/ ./examples/...
  ls -la .gpu/bin
  ;;
run)
  OUT=${2:-${OUT:-/tmp/gonccl-gpu}}
  mkdir -p "$OUT"
  VENV=${TORCH_VENV:-/opt/torch/.venv}
  WHEEL=$(ls -d "$VENV"/lib/python3*/site-packages/nvidia/nccl/lib 2>/dev/null | head -1)
  summary="$OUT/summary.txt"
  LOGS=$(mktemp -d)
  # The logs come out even when an outer timeout stops the run.
  trap 'tar czf "$OUT/logs.tar.gz" -C "$LOGS" . 2>/dev/null' EXIT
  trap 'exit 124' TERM INT
  : >"$summary"
  date -u >>"$summary"
  nvidia-smi -L >>"$summary" 2>&1
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  # CUDA_VISIBLE_DEVICES=0,1 runs the 2-rank checks on a machine of more GPUs.
  [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && GPUS=$(echo "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
  # lib label, then env assignments for that library
  check() {
    local label=$1; shift
    echo "== $label" | tee -a "$summary"
    local code
    code=$(env "$@" .gpu/bin/nccl-info 2>/dev/null | sed -n 's/.*(code \([0-9]*\)).*/\1/p' | head -1)
    TWO=yes # whether two ranks can run
    if [ "$GPUS" -lt 2 ]; then
      if [ "${code:-0}" -ge 23000 ]; then
        set -- "$@" NCCL_MULTI_RANK_GPU_ENABLE=1 GONCCL_GPU_RANKS=2
        echo "   one GPU: two ranks share it (NCCL_MULTI_RANK_GPU_ENABLE=1)" | tee -a "$summary"
      else
        TWO=
        echo "   one GPU and NCCL $code < 2.30: checks of two ranks are skipped" | tee -a "$summary"
      fi
    fi
    env "$@" .gpu/bin/nccl-info >"$LOGS/nccl-info-$label.txt" 2>&1
    grep -E "file|found by|version" "$LOGS/nccl-info-$label.txt" | head -4 | sed 's/^/   /' | tee -a "$summary"
    env "$@" .gpu/bin/nccl-info -json >"$LOGS/nccl-info-$label.json" 2>&1
    local t
    for t in nccl; do
      # One test at a time, each with its own limit: a hang costs that test.
      local rc=0 one
      : >"$LOGS/test-$t-$label.log"
      for one in $(.gpu/bin/$t-gpu.test -test.list "${TESTS:-TestGPU}"); do
        env "$@" .gpu/bin/$t-gpu.test -test.v -test.run "^$one\$" -test.count=1 -test.timeout=120s >>"$LOGS/test-$t-$label.log" 2>&1 ||
          { rc=1; grep -q -- "--- FAIL: $one" "$LOGS/test-$t-$label.log" || echo "--- FAIL: $one (no verdict: crashed or timed out)" >>"$LOGS/test-$t-$label.log"; }
      done
      local pass fail
      pass=$(grep -cE -- '(^|[^ ])--- PASS: TestGPU[A-Za-z0-9_]+ \(' "$LOGS/test-$t-$label.log")
      fail=$(grep -c -- '--- FAIL' "$LOGS/test-$t-$label.log")
      echo "   $t tests: exit $rc, $pass passed, $fail failed" | tee -a "$summary"
      grep -E -- "(^|[^ ])--- (PASS|FAIL|SKIP): TestGPU[A-Za-z0-9_]+ \(|checked|ncclAlltoAllv|watchdog:|peer dies|fault rounds|free memory" "$LOGS/test-$t-$label.log" | sed 's/^/      /' >>"$summary"
    done
    [ "${EXAMPLES:-1}" = 0 ] || examples "$label" "$@"
  }
  # examples LABEL ENV...: every example, its exact command, ok or FAIL.
  examples() {
    local label=$1; shift
    local log="$LOGS/examples-$label.log" port=$((29500 + RANDOM % 400))
    : >"$log"
    run_example() {
      echo "\$ $*" >>"$log"
      if [ -z "$TWO" ] && [[ " $* " == *" -np 2 "* || " $* " == *mpirun* || " $* " == *torchrun* || " $* " == *RANK=1* || " $* " == *faulttolerant* ]]; then
        echo "   example skipped (two ranks, one GPU): $*" | tee -a "$summary"
        return
      fi
      if timeout 120 "$@" >>"$log" 2>&1; then echo "   example ok:   $*" | tee -a "$summary"
      else echo "   example FAIL: $*" | tee -a "$summary"; fi
    }
    # newer CODE CMD...: an example that needs NCCL >= CODE runs where the
    # library is new enough; elsewhere it must exit non-zero with the typed
    # "requires NCCL >= x" error.
    local code
    code=$(env "$@" .gpu/bin/nccl-info 2>/dev/null | sed -n 's/.*(code \([0-9]*\)).*/\1/p' | head -1)
    newer() {
      if [ -z "$TWO" ] && [[ " $* " == *" -np 2 "* || " $* " == *faulttolerant* || " $* " == *onesided* ]]; then
        echo "   example skipped (two ranks, one GPU): $*" | tee -a "$summary"
        return
      fi
      local need=$1; shift
      echo "\$ $*" >>"$log"
      local out rc
      out=$(timeout 120 "$@" 2>&1); rc=$?
      echo "$out" >>"$log"
      if [ $rc -eq 0 ]; then
        echo "   example ok:   $*" | tee -a "$summary"
      elif echo "$out" | grep -q "requires >=" &&
        { [ "${code:-0}" -lt "$need" ] || echo "$out" | grep -q "which this build does not export"; }; then
        echo "   example refused as expected on $code: $* ($(echo "$out" | grep -m1 -o 'requires >= [^)]*'))" | tee -a "$summary"
      else echo "   example FAIL: $*" | tee -a "$summary"; fi
    }
    local E=.gpu/bin/examples
    # -timeout: each example's own deadline (to join and work, then again to
    # close), under run_example's 120 s, so a stuck rank reports itself.
    local T="-timeout 45s"
    run_example env "$@" $E/allreduce -np 2 $T
    run_example env "$@" $E/allreduce -np 2 $T -idfile "/tmp/gonccl-id-$label-$$"
    run_example env "$@" $E/dataparallel -np 2 $T
    if command -v mpirun >/dev/null; then
      local xs=() kv
      for kv in "$@"; do xs+=(-x "${kv%%=*}"); done
      run_example env "$@" mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE "${xs[@]}" \
        -x NCCL_COMM_ID=127.0.0.1:$port $E/allreduce $T
      run_example env "$@" mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE "${xs[@]}" \
        -x NCCL_COMM_ID=127.0.0.1:$((port+5)) $E/dataparallel $T
    fi
    run_example env "$@" bash -c "MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port+1)) WORLD_SIZE=2 RANK=1 LOCAL_RANK=1 $E/allreduce $T & MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port+1)) WORLD_SIZE=2 RANK=0 LOCAL_RANK=0 $E/allreduce $T && wait \$!"
    # The real torchrun: the ranks share the id through the TCPStore its
    # agent runs at MASTER_ADDR:MASTER_PORT (static), or on a port of its own
    # choosing (c10d).
    if [ -x "$VENV/bin/torchrun" ]; then
      run_example env "$@" "$VENV/bin/torchrun" --no-python --nproc-per-node=2 --master-port=$((port+2)) $E/allreduce $T
      run_example env "$@" "$VENV/bin/torchrun" --no-python --nproc-per-node=2 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:$((port+3)) $E/allreduce $T
      run_example env "$@" "$VENV/bin/torchrun" --no-python --nproc-per-node=2 --master-port=$((port+6)) $E/dataparallel $T
      run_example env "$@" "$VENV/bin/torchrun" --no-python --nproc-per-node=2 --rdzv-backend=c10d \
        --rdzv-endpoint=127.0.0.1:$((port+7)) $E/dataparallel $T
    fi
    # A Go rank and a Python rank (PyTorch's TCPStore, CuPy's NCCL) in one
    # communicator: both sides must run the same NCCL, the wheel's.
    if [ "$label" = wheel ] && [ -x "$VENV/bin/python3" ] && [ "$GPUS" -ge 2 ]; then
      run_example env "$@" bash -c "$VENV/bin/python3 examples/withpython/peer.py --master --store 127.0.0.1:$((port+4)) --rank 1 --dev 1 & $E/withpython -store 127.0.0.1:$((port+4)) -rank 0 -dev 0 $T && wait \$!"
    fi
    run_example env "$@" $E/multigpu $T
    run_example env "$@" $E/split $T
    run_example env "$@" $E/split -ids $T
    run_example env "$@" $E/alltoallv $T
    run_example env "$@" $E/alltoallv -grouped $T
    run_example env "$@" $E/sendrecv $T
    run_example env "$@" $E/dataparallel $T
    # NCCL 2.29.2+: a rank killed, the survivor revokes, shrinks, grows back.
    newer 22902 env "$@" $E/faulttolerant $T
    newer 22902 env "$@" $E/onesided $T
    newer 22902 env "$@" $E/onesided -np 2 $T
    # Graphs: one process per GPU, as NCCL wants for graph launches; blocking
    # communicators (the default), then non-blocking ones, whose plain
    # launches NCCL makes from a thread it starts for each.
    # Two processes sharing one GPU take turns on it (time slices, no MPS):
    # a few replays prove the graphs there; their times mean nothing.
    local few=()
    [ "$GPUS" -lt 2 ] && few=(-ops 2 -replays 20)
    run_example env "$@" $E/captured -np 2 "${few[@]}" $T
    if [ "$GPUS" -lt 2 ]; then run_example env "$@" $E/captured -np 2 -nonblocking "${few[@]}" $T
    else run_example env "$@" $E/captured -np 2 -nonblocking $T; fi
    # The documented fast path: a graph over buffers in symmetric windows.
    run_example env "$@" $E/captured -np 2 -symmetric "${few[@]}" $T
    # One process driving every GPU with its iterations captured into a graph
    # per GPU (-G): each GPU's capture is open while the others' end (EndCapture
    # instantiates the graphs once the last ends; before, CUDA refused with
    # cudaError 900); then a thread per GPU (-t), each capturing and launching
    # its own. Every checked result must be right (-c 1).
    if [ "$GPUS" -ge 2 ]; then
      local mode
      for mode in "-g $GPUS -G 5" "-g $GPUS -R 2 -G 5" "-t $GPUS -g 1 -R 2 -G 5" "-t $GPUS -g 1"; do
        echo "\$ nccl-bench $mode" >>"$log"
        local bout
        if bout=$(env "$@" timeout 120 .gpu/bin/nccl-bench -op all_reduce -d uint8 $mode -b 8 -e 1M -f 32 -n 5 -w 1 -c 1 2>&1) &&
          echo "$bout" | awk '/^ +[0-9]/ { rows++; for (i = 9; i <= 13; i += 4) if ($i == "0") ok++; else if ($i != "N/A") bad++ }
            END { exit !(rows > 0 && ok > 0 && bad == 0) }'; then
          echo "   example ok:   nccl-bench -op all_reduce -d uint8 $mode -c 1" | tee -a "$summary"
        else
          echo "   example FAIL: nccl-bench -op all_reduce -d uint8 $mode -c 1" | tee -a "$summary"
        fi
        echo "$bout" >>"$log"
      done
    fi
    grep -h "checksum\|correct\|identical\|faulttolerant:\|onesided:\|captured:" "$log" | sed 's/^/      /' >>"$summary"
  }
  if [ -n "${BUILD_NCCL:-}" ]; then
    (bash .gpu/build-nccl.sh "$BUILD_NCCL" >"$LOGS/build-nccl.txt" 2>&1) &
    nccl_build=$!
  fi
  if [ -n "${BUILD_VCCL:-}" ] && [ -d .gpu/vccl ]; then
    VCCL_LIB=$(bash .gpu/build-vccl.sh) && echo "VCCL built: $VCCL_LIB" | tee -a "$summary"
  fi
  # ONLY="vccl src" (any of system, wheel, vccl, src) runs those libraries' checks.
  want() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }
  want system && check system
  [ -n "$WHEEL" ] && want wheel && check wheel GONCCL_NCCL_LIB="$WHEEL"
  if [ -n "$WHEEL" ] && want wheel; then # the same wheel found through VIRTUAL_ENV: the search only
    echo "== venv" | tee -a "$summary"
    VIRTUAL_ENV="$VENV" .gpu/bin/nccl-info >"$LOGS/nccl-info-venv.txt" 2>&1
    grep -E "file|found by|version" "$LOGS/nccl-info-venv.txt" | head -5 | sed 's/^/   /' | tee -a "$summary"
  fi
  [ -n "${VCCL_LIB:-}" ] && want vccl && check vccl GONCCL_NCCL_LIB="$VCCL_LIB"
  if [ -n "${nccl_build:-}" ]; then
    wait "$nccl_build" && SRC_LIB=$(tail -1 "$LOGS/build-nccl.txt") &&
      echo "NCCL $BUILD_NCCL built: $SRC_LIB" | tee -a "$summary"
  fi
  [ -n "${SRC_LIB:-}" ] && want src && check src GONCCL_NCCL_LIB="$SRC_LIB"
  cat "$summary"
  ;;
*)
  echo "usage: $0 build | run [OUT]" >&2
  exit 2
  ;;
esac
