#!/usr/bin/env bash
# Builds envlib.c, envmain.c and envgo.go in a scratch folder and runs them in alternation
# (ROUNDS, default 5); prints every run, then the median of each loop per program and
# thread. CGO is not needed: envgo is built with CGO_ENABLED=0 against this module's purego.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
w=$(mktemp -d)
gcc -shared -fPIC -O2 -o "$w/libenv.so" "$here/envlib.c" -lpthread
gcc -O2 -o "$w/envmain" "$here/envmain.c" -ldl
(cd "$top" && CGO_ENABLED=0 go build -o "$w/envgo" "$here/envgo.go")
cd "$w"
for r in $(seq "${ROUNDS:-5}"); do
  ./envmain | sed "s/^/round $r /"
  ./envmain after | grep malloc | sed "s/^/round $r /"
  ./envgo | sed "s/^/round $r /"
  MALLOC_ARENA_MAX=1 ./envgo | grep malloc | sed "s/^Go /Go-arena1 /; s/^/round $r /"
done | tee runs.txt
echo
echo "medians (ns per iteration): program loop, main or goroutine, pthread"
awk '{ k = $3 " " $4; a[k] = a[k] " " $6; b[k] = b[k] " " $8 }
  function med(s,   n, v, i, j, t) { n = split(s, v, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] + 0 < v[i] + 0) { t = v[i]; v[i] = v[j]; v[j] = t }; return v[int((n + 1) / 2)] }
  END { for (k in a) printf "%-24s %8.2f %8.2f\n", k, med(a[k]), med(b[k]) }' runs.txt | sort
rm -rf "$w"
