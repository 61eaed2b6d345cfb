#!/usr/bin/env bash
# Runs gonccl against a real libnccl on a machine with no GPU: Debian 13's
# libnccl2 (NCCL 2.22.3) and libcudart12, with the glibc they need, unpacked into
# a private folder and run through that folder's dynamic loader. The tests named
# TestRealNCCL* (realnccl_test.go) check what the real library says: how it was
# found, its version and functions, unique ids, error strings, and how it fails
# without a GPU; then nccl-info's report. Proves the ABI against NVIDIA's build,
# not only against gonccl's own fake. amd64 only.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(uname -m)" != x86_64 ]; then
  echo "test-real-nccl: Debian's libnccl2 is amd64 only; nothing to do on $(uname -m)"
  exit 0
fi

cache=${GONCCL_REAL_NCCL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gonccl/real-nccl}
root="$cache/root"
R="$root/usr/lib/x86_64-linux-gnu"
if [ ! -e "$R/libnccl.so.2" ] || [ ! -e "$R/ld-linux-x86-64.so.2" ]; then
  echo "== fetching Debian 13 libnccl2, libcudart12 and their glibc into $cache"
  mkdir -p "$cache/lists/partial" "$cache/debs" "$root"
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main contrib non-free" >"$cache/sources.list"
  opts=(-o "Dir::Etc::SourceList=$cache/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$cache/lists" -o "Dir::Cache=$cache/apt-cache" -o APT::Architecture=amd64)
  mkdir -p "$cache/apt-cache/archives/partial"
  apt-get "${opts[@]}" update -qq
  (cd "$cache/debs" && apt-get "${opts[@]}" download libnccl2 libcudart12 libc6 libstdc++6 libgcc-s1)
  for d in "$cache"/debs/*.deb; do dpkg -x "$d" "$root"; done
fi
ls "$R"/libnccl.so.2* "$R"/libcudart.so.12* >/dev/null

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
CGO_ENABLED=0 go test -c -o "$work/nccl.test" .
CGO_ENABLED=0 go build -o "$work/nccl-info" ./cmd/nccl-info

run() { "$R/ld-linux-x86-64.so.2" --library-path "$R" "$@"; }
export GONCCL_REAL_NCCL=1 GONCCL_NCCL_LIB="$R/libnccl.so.2" GONCCL_CUDART_LIB="$R"

echo "== tests against the real NCCL"
run "$work/nccl.test" -test.run '^TestRealNCCL' -test.v -test.count=1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|    )'

echo "== nccl-info against the real NCCL"
out=$(run "$work/nccl-info" 2>&1) || { echo "$out"; echo "nccl-info failed"; exit 1; }
echo "$out"
for want in "version   2.22.3" "found by  GONCCL_NCCL_LIB" "absent   ncclAlltoAll " "present  ncclCommSplit" "devices   none"; do
  grep -qF "$want" <<<"$out" || { echo "nccl-info: missing \"$want\""; exit 1; }
done
echo "test-real-nccl: passed (NCCL 2.22.3 from Debian, no GPU)"
