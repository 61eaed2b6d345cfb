#!/usr/bin/env bash
# Builds examples the way a user copies one: main.go alone in a fresh module of
# its own, which requires github.com/gonccl/nccl, pointed at this checkout by a
# replace directive. Proves that the examples use only the public packages
# (github.com/gonccl/nccl and github.com/gonccl/nccl/launch, plus the standard
# library) and build without cgo for linux/amd64 and linux/arm64.
#
#   scripts/test-copied-example.sh              # examples/allreduce, then every other example
#   scripts/test-copied-example.sh split ...    # only these examples
#
# Network: only the Go module proxy, for gonccl's own dependencies (purego,
# golang.org/x/sys), whose checksums come from this checkout's go.sum; nothing
# when they are in the module cache. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
module=$(go list -m)

die() {
  echo "test-copied-example: FAILED: $*" >&2
  exit 1
}

if [ $# -gt 0 ]; then
  names=("$@")
else
  names=(allreduce)
  for d in examples/*/; do
    d=${d%/}
    [ "${d##*/}" = allreduce ] || names+=("${d##*/}")
  done
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-mod=mod CGO_ENABLED=0 GOWORK=off

for name in "${names[@]}"; do
  src=examples/$name/main.go
  [ -f "$src" ] || die "$src does not exist"
  dir=$work/$name
  mkdir -p "$dir"
  cp "$src" "$dir/main.go"
  (
    cd "$dir"
    go mod init example.com/copied/"$name" >/dev/null 2>&1
    go mod edit -require="$module@v0.0.0-00010101000000-000000000000" -replace="$module=$root"
    cp "$root/go.sum" go.sum # gonccl's dependencies' checksums, as a user's go.sum would have them
    go mod tidy >/dev/null
  ) || die "$name: setting up the module"
  # Only the v1 API: the root package and launch (internal ones would not
  # build here; abi and the rest would, so they are refused by name).
  imports=$(cd "$dir" && GOOS=linux go list -f '{{join .Imports "\n"}}' .) || die "$name: go list"
  bad=$(echo "$imports" | grep -E '^[^/]+\.[^/]*/' | grep -Ev "^$module(/launch)?\$" || true)
  [ -z "$bad" ] || die "$name imports $(echo $bad): not the public v1 API"
  for arch in amd64 arm64; do
    (cd "$dir" && GOOS=linux GOARCH=$arch go build -o "$work/bin/$name-$arch" .) || die "$name: go build for linux/$arch"
    file_arch=$(go version -m "$work/bin/$name-$arch" | awk '$1 == "build" && $2 ~ /^GOARCH=/ {sub("GOARCH=", "", $2); print $2}')
    [ "$file_arch" = "$arch" ] || die "$name: built for $file_arch, want $arch"
    cgo=$(go version -m "$work/bin/$name-$arch" | awk '$1 == "build" && $2 ~ /^CGO_ENABLED=/ {sub("CGO_ENABLED=", "", $2); print $2}')
    [ "$cgo" = 0 ] || die "$name: built with CGO_ENABLED=$cgo"
  done
  deps=$(cd "$dir" && go list -m all | tail -n +2 | tr '\n' ' ')
  echo "ok  $name: fresh module, $module replaced by $root; linux/amd64 and linux/arm64 without cgo; modules: $deps"
done
echo "test-copied-example: ${#names[@]} example(s) build as copied"
