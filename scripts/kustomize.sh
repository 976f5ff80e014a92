#!/usr/bin/env bash
# kustomize, built from its Go module at the version pinned below, for the test that renders
# deploy/ (tests/kubernetes/test_deploy_manifests.py). Built once per machine into a cache keyed
# by that version and the Go version, like scripts/controlplane.sh (which calls this script, so
# `make controlplane` builds it too).
#
#   scripts/kustomize.sh          build if missing; print the path of the binary
#   scripts/kustomize.sh --where  print that path only (exit 1 if not built)
#
# The first build on a 2-core machine takes ~2 minutes with an empty Go module cache.
# Needs Go >= 1.26 (v5.8.2's go.mod says go 1.26.0; v5.8.3 needs Go 1.27) and the Go module
# proxy.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
version="${AUTOTUNE_KUSTOMIZE_VERSION:-v5.8.2}"

# shellcheck source=scripts/pick-go.sh
source "$here/scripts/pick-go.sh"

go_bin=$(pick_go scripts/kustomize.sh)
go_version=$(GOTOOLCHAIN=local "$go_bin" env GOVERSION)
key=$(printf '%s\n%s\n' "$version" "$go_version" | sha256sum | cut -c1-16)
cache="${AUTOTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/autotune}/kustomize/$version-$key"

if [ -x "$cache/bin/kustomize" ]; then
  echo "$cache/bin/kustomize"
  exit 0
fi
[ "${1:-}" = "--where" ] && exit 1

echo "building kustomize $version with $go_version into $cache ..." >&2
started=$(date +%s)
tmp="$cache.tmp.$$"
rm -rf "$tmp" && mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT
(
  # Outside any module: `go install pkg@version` resolves kustomize's own go.mod and go.sum
  # (checked against the checksum database), so the version above is all that pins it.
  cd "$tmp"
  GOTOOLCHAIN=local GOFLAGS= CGO_ENABLED=0 GOBIN="$tmp/bin" \
    "$go_bin" install -trimpath -ldflags "-s -w" "sigs.k8s.io/kustomize/kustomize/v5@$version"
)
echo "kustomize $version, built with $go_version in $(( $(date +%s) - started ))s" \
  > "$tmp/VERSION"
rm -rf "$cache" && mv "$tmp" "$cache"
trap - EXIT
echo "built in $(( $(date +%s) - started ))s" >&2
echo "$cache/bin/kustomize"
