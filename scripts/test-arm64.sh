#!/usr/bin/env bash
# Runs gonccl's whole fake-library test suite as linux/arm64 code under qemu-user:
# the fake libraries cross-compiled with aarch64-linux-gnu-gcc, the test binaries
# with CGO_ENABLED=0 GOARCH=arm64. This proves the arm64 call path (AAPCS64
# registers and stack, the by-value unique id passed as a pointer to a copy) and
# every collective on the second architecture users deploy to.
# Installs qemu-user and the cross compiler with apt-get when missing (as root).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v qemu-aarch64 >/dev/null || ! command -v aarch64-linux-gnu-gcc >/dev/null; then
  [ "$(id -u)" = 0 ] || { echo "need qemu-user and gcc-aarch64-linux-gnu (run as root to install)"; exit 1; }
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu

echo "== fake libraries for arm64"
go run ./internal/fakes/build -cc aarch64-linux-gnu-gcc -o "$work/fakes"
aarch64-linux-gnu-gcc -shared -fPIC -O2 -o "$work/libargs.so" internal/ccall/testdata/args.c
aarch64-linux-gnu-readelf -h "$work/fakes/default/libnccl.so.2" | grep -q AArch64

status=0
for pkg in $(CGO_ENABLED=0 GOARCH=arm64 go list -f '{{if .TestGoFiles}}{{.ImportPath}}{{else if .XTestGoFiles}}{{.ImportPath}}{{end}}' ./...); do
  name=$(basename "$pkg")
  echo "== $pkg (arm64, qemu)"
  CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go test -c -o "$work/$name.test" "$pkg"
  # The test binary re-executes itself for child-process tests, through the
  # emulator named by GONCCL_TEST_EMULATOR.
  if ! (cd "$(go list -f '{{.Dir}}' "$pkg")" && GONCCL_FAKE_DIR="$work/fakes" GONCCL_CCALL_TESTLIB="$work/libargs.so" \
      GONCCL_TEST_EMULATOR=qemu-aarch64 qemu-aarch64 "$work/$name.test" -test.count=1 -test.timeout=600s -test.v \
      | grep -E '^(--- |PASS|FAIL|ok)' | grep -v '^--- PASS: .*/'); then
    status=1
  fi
done
[ $status = 0 ] && echo "arm64: every package passed under qemu" || echo "arm64: FAILED"
exit $status
