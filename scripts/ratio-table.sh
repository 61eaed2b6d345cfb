#!/usr/bin/env bash
# Prints the table of nccl-bench against nccl-tests from their saved outputs:
# per operation and size, the out-of-place busbw of each, their ratio, the
# times and the difference.
#
#   scripts/ratio-table.sh TESTS_FILE BENCH_FILE OP...
#
# where the file names hold %s for the operation (e.g. OUT/nccl-tests-%s.txt).
# Rows are matched by size; anything printed between them (VCCL's debug lines
# land in the middle of rows) is skipped. Operations without both files are left out.
set -uo pipefail
tests=$1 bench=$2
shift 2
# rows FILE: "size time busbw" of every out-of-place result.
rows() {
  grep -oE '[0-9]+ +[0-9]+ +[a-z0-9_]+ +[a-z]+ +-?[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+' "$1" |
    awk '{print $1, $6, $8}' | sort -k1,1
}
printf "%-15s %12s %11s %11s %7s %12s %12s %9s\n" op size "tests busbw" "bench busbw" ratio "tests us" "bench us" "diff us"
for op in "$@"; do
  # shellcheck disable=SC2059
  t=$(printf "$tests" "$op") b=$(printf "$bench" "$op")
  [ -s "$t" ] && [ -s "$b" ] || continue
  join <(rows "$t") <(rows "$b") | sort -n | awk -v op="$op" '{ r = ($3 > 0) ? $5 / $3 : 0;
    printf "%-15s %12d %11.2f %11.2f %7.3f %12.2f %12.2f %9.2f\n", op, $1, $3, $5, r, $2, $4, $4 - $2 }'
done
