#!/usr/bin/env bash
# Runs every example end to end against the fake libraries (testdata/, built by
# internal/fakes/build with the host C compiler), on FAKECUDA_DEVICES fake GPUs:
# the goroutine-per-GPU examples and multigpu in one process, allreduce as a
# job of one (-np 1, alone, and with an id file). Each example checks every
# element of its result itself.
#
# The fakes meet ranks inside one process only, so allreduce -np 2 cannot form
# a job; it is run to prove the deadline: both ranks must fail with
# "context deadline exceeded" within -timeout instead of hanging.
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

go run ./internal/fakes/build -o "$work/fakes" || die "building the fakes"
mkdir -p "$work/bin"
CGO_ENABLED=0 go build -o "$work/bin/" ./examples/... || die "building the examples"
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

# Two processes cannot meet through the fakes: the deadline must end both.
start=$SECONDS
if out=$(GONCCL_NCCL_LIB=$work/fakes/default timeout 30 $E/allreduce -np 2 -n 1024 -timeout 2s 2>&1); then
  echo "FAIL  allreduce -np 2 succeeded across processes: the fakes cannot do that"
  fails=$((fails + 1))
elif [ "$(echo "$out" | grep -c 'context deadline exceeded')" -ne 2 ] || [ $((SECONDS - start)) -gt 10 ]; then
  echo "FAIL  allreduce -np 2 -timeout 2s: want both ranks to fail on the deadline within 10 s; got, after $((SECONDS - start)) s:"
  echo "$out" | sed 's/^/      /'
  fails=$((fails + 1))
else
  echo "ok    [default] allreduce -np 2 -timeout 2s: both ranks gave up at the deadline ($((SECONDS - start)) s), as they must with the fakes"
fi
[ $fails -eq 0 ] || die "$fails run(s)"
echo "test-examples-fake: every example passed against the fakes"
