# bench-wrong.awk LOG: the table of nccl-bench (or nccl-tests) in LOG, checked.
# A row is found anywhere in its line: a library's own prints to stdout (VCCL's
# "RMA Work Batch" dumps) are flushed in blocks and may precede a row on its
# line. Prints "N sizes, W wrong" (the #wrong columns summed; N/A counts
# nothing) and exits 1 where no row was checked or any element was wrong.
match($0, /[0-9]+ +[0-9]+ +[a-z0-9]+ +[a-z]+ +-?[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +([0-9]+|N\/A)/) {
  n = split(substr($0, RSTART), f, / +/)
  rows++
  for (i = 9; i <= 13 && i <= n; i += 4) if (f[i] ~ /^[0-9]+$/) { checked++; w += f[i] }
}
END { printf "%d sizes, %d wrong", rows, w; exit !(rows > 0 && checked > 0 && w == 0) }
