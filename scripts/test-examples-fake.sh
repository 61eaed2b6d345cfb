#!/usr/bin/env bash
# Runs every example end to end against the fake libraries (package nccltest, built by
# cmd/nccl-fakes with the host C compiler), on FAKECUDA_DEVICES fake GPUs:
# the goroutine-per-GPU examples and multigpu in one process, allreduce as a
# job of one (-np 1, alone, and with an id file). Each example checks every
# element of its result itself.
#
# Ranks in different processes meet through the fakes as through NCCL, over
# loopback TCP: allreduce as jobs of 2 and 3 processes (-np: NCCL_COMM_ID, rank
# 0 hosting the rendezvous), dataparallel as jobs of 2 and 3 processes (the
# weights compared bit for bit across the ranks), with an id file under -np, and as two processes
# started by hand with torchrun's variables and an id file but no NCCL_COMM_ID
# (rank 0's ncclGetUniqueId hosts it); nccl-bench -np 2 over int8 data, every
# result checked on every rank (-c 1), on the default and VCCL variants (VCCL:
# the native ncclAlltoAllv on symmetric windows across processes); scripts/nonblocking-go
# -np 2 (the Go half of scripts/bench-nonblocking.sh), also with scripts/nbtrace.c preloaded.
#
#   scripts/test-examples-fake.sh      # every fake variant the examples support
#
# Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
die() {
  echo "test-examples-fake: FAILED: $*" >&2
  exit 1
}

go run ./cmd/nccl-fakes -o "$work/fakes" >/dev/null || die "building the fakes"
mkdir -p "$work/bin"
CGO_ENABLED=0 go build -o "$work/bin/" ./examples/... ./cmd/nccl-bench ./scripts/nonblocking-go ||
  die "building the examples, nccl-bench and scripts/nonblocking-go"
export GONCCL_CUDART_LIB=$work/fakes/cudart FAKECUDA_DEVICES=${FAKECUDA_DEVICES:-4} NCCL_COMM_ID=
E=$work/bin
fails=0
run() { # run VARIANT CMD...: the command must succeed within 60 s
  local v=$1
  shift
  local out
  if out=$(cd "$work" && GONCCL_NCCL_LIB=$work/fakes/$v timeout 60 "$@" 2>&1); then
    echo "ok    [$v] ${*#$E/}: $(echo "$out" | tail -1)"
  else
    echo "FAIL  [$v] ${*#$E/}:"
    echo "$out" | sed 's/^/      /'
    fails=$((fails + 1))
  fi
}
for v in default old vccl11; do
  run $v $E/allreduce -n 65536
  run $v $E/allreduce -np 1 -n 65536
  run $v $E/allreduce -np 1 -n 65536 -idfile "$work/id-$v"
  run $v $E/multigpu -n 65536
  run $v $E/split
  run $v $E/split -ids
  run $v $E/alltoallv -k 256
  run $v $E/alltoallv -k 256 -grouped
  run $v $E/sendrecv -n 65536
  run $v $E/dataparallel
done
run vccl10 env GONCCL_ALLTOALLV_ABI=10 $E/alltoallv -k 256
# One-sided puts and signals (NCCL >= 2.29.2): the v230 fake, ranks as
# goroutines; every byte checked.
run v230 $E/onesided
run v230 $E/onesided -gpus 3 -bytes 5003 -offset 1237
# Across processes: one-sided puts between rank processes, and a job that loses
# rank 1 to SIGKILL, revokes, shrinks, and grows back with a replacement process.
run v230 $E/onesided -np 2 -timeout 30s
run v230 $E/faulttolerant -timeout 30s -step-timeout 1s
# A loop of checked all-reduces, as a job of one (the node-loss drill runs in
# scripts/test-launchers.sh, under torchrun).
run default $E/nodeloss -n 65536 -for 1s
refused() { # refused VARIANT TEXT CMD...: the command must exit 1 within 60 s, saying TEXT
  local v=$1 want=$2
  shift 2
  local out rc=0
  out=$(cd "$work" && GONCCL_NCCL_LIB=$work/fakes/$v timeout 60 "$@" 2>&1) || rc=$?
  if [ $rc -eq 1 ] && echo "$out" | grep -qF -- "$want"; then # log.Fatal: an error, not a crash (2) or a hang (124)
    echo "ok    [$v] ${*#$E/}: refused: $(echo "$out" | grep -F -- "$want" | head -1)"
  else
    echo "FAIL  [$v] ${*#$E/}: exit $rc, want a failure saying \"$want\":"
    echo "$out" | sed 's/^/      /'
    fails=$((fails + 1))
  fi
}
# On NCCL 2.28 it must stop with the library's typed error, not crash or hang.
refused default "(2.28.3; requires >= 2.29.2)" $E/onesided -timeout 30s
refused default "(2.28.3; requires >= 2.28.7)" $E/faulttolerant -timeout 30s
# A step of all-reduces captured once into a CUDA graph and replayed, from one goroutine (nccl.Threads)
# and as 2 processes; every element checked on sampled replays and after the timed runs.
run default $E/captured -replays 200 -ops 4 -n 256
run v230 $E/captured -replays 200 -ops 4 -n 256
run v230 $E/captured -replays 200 -ops 4 -n 256 -symmetric
run default $E/captured -replays 200 -ops 4 -n 256 -nonblocking
run default $E/captured -np 2 -replays 200 -ops 4 -n 256 -timeout 30s
run default $E/captured -np 2 -nonblocking -replays 200 -ops 4 -n 256 -timeout 30s
run default $E/captured -np 2 -symmetric -replays 200 -ops 4 -n 256 -timeout 30s

bench() { # bench VARIANT ARGS...: nccl-bench; every result it checks must be right
  local v=$1
  shift
  local out
  if out=$(cd "$work" && GONCCL_NCCL_LIB=$work/fakes/$v timeout 60 $E/nccl-bench -d int8 -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 "$@" 2>&1) &&
    echo "$out" | awk '/^ +[0-9]/ { rows++; for (i = 9; i <= 13; i += 4) if ($i == "0") ok++; else if ($i != "N/A") bad++ }
      END { exit !(rows > 0 && ok > 0 && bad == 0) }'; then
    echo "ok    [$v] nccl-bench $*: $(echo "$out" | awk '/^ +[0-9]/ { n++ } END { print n }') sizes, every checked result right"
  else
    echo "FAIL  [$v] nccl-bench $*:"
    echo "$out" | sed 's/^/      /'
    fails=$((fails + 1))
  fi
}
pair() { # pair VARIANT: allreduce as ranks 0 and 1 started by hand, the id through a file
  local v=$1 out id=$work/id-pair-$1
  if out=$(cd "$work" && export GONCCL_NCCL_LIB=$work/fakes/$v WORLD_SIZE=2 && (RANK=1 LOCAL_RANK=1 timeout 60 $E/allreduce -n 65536 -timeout 30s -idfile "$id" &
    RANK=0 LOCAL_RANK=0 timeout 60 $E/allreduce -n 65536 -timeout 30s -idfile "$id" && wait $!) 2>&1) &&
    [ "$(echo "$out" | grep -c 'floats correct')" -eq 2 ]; then
    echo "ok    [$v] allreduce, ranks 0 and 1 by hand, -idfile, no NCCL_COMM_ID: $(echo "$out" | tail -1)"
  else
    echo "FAIL  [$v] allreduce, ranks 0 and 1 by hand, -idfile, no NCCL_COMM_ID:"
    echo "$out" | sed 's/^/      /'
    fails=$((fails + 1))
  fi
}

# Across processes: each rank checks every element itself.
for v in default vccl11; do
  run $v $E/allreduce -np 2 -n 65536 -timeout 30s
  run $v $E/allreduce -np 3 -n 65536 -timeout 30s
  run $v $E/allreduce -np 2 -n 65536 -timeout 30s -idfile "$work/id-np-$v"
  run $v $E/dataparallel -np 2 -samples 512 -timeout 30s
  run $v $E/dataparallel -np 3 -samples 512 -timeout 30s -idfile "$work/id-dp-$v"
  pair $v
  for op in all_reduce all_gather reduce_scatter alltoall broadcast gather sendrecv alltoallv; do
    bench $v -np 2 -op $op
  done
done
run old $E/allreduce -np 2 -n 65536 -timeout 30s
bench default -np 2 -g 2 -op all_reduce # 2 processes of 2 ranks each
# nccl-tests' launch modes: -G N (each size's iterations captured into a CUDA
# graph per GPU, launched N times; checked from a graph), -R 1 (ncclCommRegister)
# and -R 2 (symmetric windows), in one process and across processes.
for v in default v230; do
  bench $v -g 2 -G 3 -R 2 -op all_reduce
  bench $v -g 3 -G 2 -R 1 -op reduce_scatter
  bench $v -g 2 -G 2 -op sendrecv
done
bench default -np 2 -G 3 -R 2 -op all_reduce
bench default -np 2 -G 2 -R 1 -op all_gather
bench default -np 2 -g 2 -G 2 -op broadcast
bench vccl11 -np 2 -G 2 -R 2 -op alltoallv
# On NCCL 2.14 -R stops with the library's typed error.
refused old "ncclCommWindowRegister not supported by" $E/nccl-bench -R 2 -G 2
refused old "ncclCommRegister not supported by" $E/nccl-bench -R 1
# The Go half of scripts/bench-nonblocking.sh, as 2 processes: a time from each rank
# for each size and communicator.
lines() { # lines N PATTERN VARIANT CMD...: the command succeeds and prints N lines matching PATTERN
  local want=$1 pat=$2 v=$3
  shift 3
  local out
  if out=$(cd "$work" && GONCCL_NCCL_LIB=$work/fakes/$v timeout 60 "$@" 2>&1) && [ "$(echo "$out" | grep -c "$pat")" = "$want" ]; then
    echo "ok    [$v] ${*#$E/}: $want lines"
  else
    echo "FAIL  [$v] ${*#$E/}: want $want lines matching $pat"
    echo "$out" | sed 's/^/      /'
    fails=$((fails + 1))
  fi
}
lines 12 '^Go np 2 n [0-9]* [-a-z]*: rank [01] [0-9.]* us' default $E/nonblocking-go -np 2 -n 20
# scripts/nbtrace.c (bench-nonblocking.sh's NBTRACE=1), preloaded into the same job, times the
# threads the fake NCCL starts for its non-blocking launches, joined as NCCL's are by the poll
# that completes them: at least 123 per rank (3 sizes of 20 + 1 + 20 launches; rank 0's
# rendezvous threads come on top), a line per 100, so each rank prints at least one.
${CC:-cc} -O2 -shared -fPIC -o "$work/nbtrace.so" scripts/nbtrace.c -ldl -lpthread || die "building scripts/nbtrace.c"
if out=$(cd "$work" && GONCCL_NCCL_LIB=$work/fakes/default LD_PRELOAD="$work/nbtrace.so" NBTRACE_BATCH=100 \
  timeout 60 $E/nonblocking-go -np 2 -n 20 2>&1) &&
  [ "$(echo "$out" | grep '^nbtrace pid [0-9]*: 100 threads of libnccl joined (of [0-9]* started);.* cycle [0-9.]* ' |
    awk '{ print $3 }' | sort -u | wc -l)" = 2 ]; then
  echo "ok    [default] nbtrace.so nonblocking-go -np 2 -n 20: each rank's launch threads timed"
else
  echo "FAIL  [default] nbtrace.so nonblocking-go -np 2 -n 20: want a line from each of 2 ranks"
  echo "$out" | sed 's/^/      /'
  fails=$((fails + 1))
fi
[ $fails -eq 0 ] || die "$fails run(s)"
echo "test-examples-fake: every example passed against the fakes"
