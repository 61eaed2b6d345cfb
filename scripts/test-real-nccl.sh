#!/usr/bin/env bash
# Runs gonccl against NVIDIA's real libnccl on a machine with no GPU.
#
# Debian 13 (trixie) ships libnccl2 (NCCL 2.22.3) and libcudart12 (CUDA 12.4),
# built for glibc 2.38 or later. This script downloads them with the glibc,
# libstdc++ and libgcc of trixie into a private folder (no system package is
# installed or changed), builds the test binary and nccl-info with
# CGO_ENABLED=0, and runs both through that folder's own dynamic loader:
#
#   $R/ld-linux-x86-64.so.2 --library-path $R ./nccl.test -test.run '^TestRealNCCL'
#
# What passing proves, against NVIDIA's build rather than gonccl's fake:
#   - the search finds the library through GONCCL_NCCL_LIB / GONCCL_CUDART_LIB and
#     reports the file really mapped (libnccl.so.2.22.3, libcudart.so.12.4.127);
#   - the version (22203 -> 2.22.3) and which optional functions 2.22 has;
#   - ncclGetUniqueId writes NCCL's bootstrap handle into gonccl's 128-byte id, and
#     with NCCL_COMM_ID the id is byte for byte the one NCCL builds from it;
#   - ncclGetErrorString's texts, and ncclGetLastError's text after a failure;
#   - with no GPU: the CUDA runtime's answer is a typed error matching
#     ErrNoDevice; InitRank fails there; ncclCommInitRank (the by-value id call)
#     and ncclCommInitAll fail inside NCCL with ncclUnhandledCudaError;
#   - nccl-info's report of the same library.
# The TestRealNCCL* tests are in nccl_real_test.go; every one must pass, none skip.
#
# Environment:
#   GONCCL_REAL_NCCL_CACHE  folder for the downloaded packages and the unpacked
#                           root (default ${XDG_CACHE_HOME:-$HOME/.cache}/gonccl/real-nccl);
#                           reused when present, so later runs need no network.
#   DEBIAN_MIRROR           Debian mirror (default: the one this machine's apt uses).
#
# Needs apt-get and dpkg (a Debian or Ubuntu host), network on the first run,
# and, for apt-get update into the private lists, usually root. amd64 only: NVIDIA's
# Debian packages exist for amd64 alone.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS

if [ "$(uname -m)" != x86_64 ]; then
  echo "test-real-nccl: skipped: Debian's libnccl2 is built for amd64 only, this host is $(uname -m)"
  exit 0
fi

die() {
  echo "test-real-nccl: FAILED: $*" >&2
  exit 1
}

cache=${GONCCL_REAL_NCCL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gonccl/real-nccl}
root="$cache/root"
R="$root/usr/lib/x86_64-linux-gnu"
packages=(libnccl2 libcudart12 libc6 libstdc++6 libgcc-s1)

# The mirror this machine's apt uses: deb822 sources first, then a one-line list.
mirror() {
  local m=""
  if [ -n "${DEBIAN_MIRROR:-}" ]; then
    echo "$DEBIAN_MIRROR"
    return
  fi
  if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    m=$(awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) { print $i; exit } }' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$m" ] && [ -r /etc/apt/sources.list ]; then
    m=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/ && $i !~ /security/) { print $i; exit } }' /etc/apt/sources.list)
  fi
  echo "${m:-http://deb.debian.org/debian}"
}

fetch() {
  if ! command -v apt-get >/dev/null || ! command -v dpkg-deb >/dev/null; then
    die "apt-get and dpkg-deb are needed to fetch Debian's packages (or fill $cache from a Debian host)"
  fi
  local m keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  [ -r "$keyring" ] || die "$keyring missing (install debian-archive-keyring)"
  m=$(mirror)
  echo "== fetching Debian 13 ${packages[*]} from $m into $cache"
  mkdir -p "$cache/lists/partial" "$cache/apt-cache/archives/partial" "$cache/debs"
  echo "deb [signed-by=$keyring] $m trixie main contrib non-free" >"$cache/sources.list"
  # Only the private list: the host's sources, pins and architectures play no part.
  local opts=(-o "Dir::Etc::SourceList=$cache/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$cache/lists" -o "Dir::Cache=$cache/apt-cache"
    -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
    -o APT::Architecture=amd64 -o APT::Architectures=amd64)
  # As root, apt's download sandbox user cannot write into a private folder.
  if [ "$(id -u)" = 0 ]; then opts+=(-o APT::Sandbox::User=root); fi
  apt-get "${opts[@]}" -qq update || die "apt-get update of trixie from $m"
  rm -f "$cache"/debs/*.deb
  (cd "$cache/debs" && apt-get "${opts[@]}" download "${packages[@]}") || die "apt-get download ${packages[*]}"
  # Unpack into a fresh folder and move it into place only when complete, so an
  # interrupted run never leaves a half-filled root that looks usable.
  local tmp="$cache/root.new"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  for d in "$cache"/debs/*.deb; do
    dpkg-deb -x "$d" "$tmp" || die "dpkg-deb -x $d"
  done
  rm -rf "$root"
  mv "$tmp" "$root"
}

if [ ! -e "$R/libnccl.so.2" ] || [ ! -e "$R/libcudart.so.12" ] || [ ! -e "$R/ld-linux-x86-64.so.2" ]; then
  fetch
else
  echo "== using the packages cached in $cache"
fi
if command -v dpkg-deb >/dev/null; then
  for d in "$cache"/debs/*.deb; do
    if [ -e "$d" ]; then echo "   $(dpkg-deb -f "$d" Package) $(dpkg-deb -f "$d" Version)"; fi
  done
fi
for f in libnccl.so.2 libcudart.so.12 ld-linux-x86-64.so.2 libc.so.6 libstdc++.so.6 libgcc_s.so.1; do
  [ -e "$R/$f" ] || die "$R/$f missing from the unpacked packages (remove $cache to fetch again)"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "== building the test binary and nccl-info (CGO_ENABLED=0)"
CGO_ENABLED=0 go test -c -o "$work/nccl.test" . || die "go test -c"
CGO_ENABLED=0 go build -o "$work/nccl-info" ./cmd/nccl-info || die "go build ./cmd/nccl-info"

# Through trixie's loader and libraries only; nothing of the host's environment
# that could change what is loaded or what NCCL does.
run() {
  env -u LD_PRELOAD -u LD_LIBRARY_PATH -u NCCL_COMM_ID -u NCCL_DEBUG -u NCCL_DEBUG_FILE \
    -u NCCL_HOME -u NUMBA_NCCLLIB -u VIRTUAL_ENV -u CONDA_PREFIX -u CUDA_HOME -u CUDA_PATH \
    -u GONCCL_ALLTOALLV_ABI \
    GONCCL_REAL_NCCL=1 GONCCL_NCCL_LIB="$R/libnccl.so.2" GONCCL_CUDART_LIB="$R" \
    "$R/ld-linux-x86-64.so.2" --library-path "$R" "$@"
}

echo "== TestRealNCCL* against NCCL from $R"
mapfile -t tests < <(run "$work/nccl.test" -test.list '^TestRealNCCL')
[ ${#tests[@]} -gt 0 ] || die "no TestRealNCCL* tests in the binary"
if ! run "$work/nccl.test" -test.run '^TestRealNCCL' -test.v -test.count=1 -test.timeout=60s >"$work/tests.log" 2>&1; then
  cat "$work/tests.log"
  die "TestRealNCCL* failed (full output above)"
fi
grep -E '^(=== RUN|--- |    |PASS|FAIL|ok)' "$work/tests.log" || true
for t in "${tests[@]}"; do
  grep -q "^--- PASS: $t " "$work/tests.log" || { cat "$work/tests.log"; die "$t did not pass (skipped or not run)"; }
done
if grep -q '^--- SKIP' "$work/tests.log"; then
  die "a test skipped: every TestRealNCCL* must run here"
fi

echo "== nccl-info against the same NCCL"
out=$(run "$work/nccl-info" 2>&1) || { echo "$out"; die "nccl-info exited non-zero"; }
echo "$out"
for want in \
  "found by  GONCCL_NCCL_LIB" \
  "version   2.22.3 (code 22203)" \
  "libnccl.so.2.22.3" \
  "present  ncclCommSplit" \
  "present  ncclCommRegister" \
  "present  ncclMemAlloc" \
  "absent   ncclAlltoAll " \
  "absent   ncclGather " \
  "absent   ncclScatter " \
  "absent   ncclAlltoAllv " \
  "found by  GONCCL_CUDART_LIB" \
  "runtime   12.4" \
  "driver    none" \
  "devices   none: cudaGetDeviceCount: cudaErrorInsufficientDriver"; do
  grep -qF -- "$want" <<<"$out" || die "nccl-info's report lacks \"$want\""
done
json=$(run "$work/nccl-info" -json) || die "nccl-info -json exited non-zero"
grep -q '"version_code": 22203' <<<"$json" || die "nccl-info -json lacks \"version_code\": 22203"

echo
echo "test-real-nccl: passed in $((SECONDS - start))s: ${#tests[@]} TestRealNCCL* tests and nccl-info against"
echo "  NVIDIA's libnccl 2.22.3 and libcudart 12.4 (Debian 13), no GPU, no cgo: loading through"
echo "  GONCCL_NCCL_LIB/GONCCL_CUDART_LIB, version, optional functions, unique ids, error and"
echo "  last-error texts, and clean no-GPU failures of the CUDA runtime and of NCCL itself"
