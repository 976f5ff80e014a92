#!/usr/bin/env bash
# The test control plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok,
# the upstream programs built from their Go modules at the versions pinned in
# tests/controlplane/go.mod (and go.sum). Built once per machine into a cache keyed by go.mod,
# go.sum and the Go version, so a second `make test` reuses them.
#
#   scripts/controlplane.sh          build if missing (and kustomize: scripts/kustomize.sh);
#                                    print the directory of the control plane's binaries
#   scripts/controlplane.sh --where  print that directory only (exit 1 if not built)
#
# The first build on a 2-core machine takes ~9 minutes (docs/measurements/controlplane-*.txt).
# Needs Go >= 1.26 (the machine's, else the one of the [local] extra) and the Go module proxy.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
src="$here/tests/controlplane"

# shellcheck source=scripts/pick-go.sh
source "$here/scripts/pick-go.sh"

go_bin=$(pick_go scripts/controlplane.sh)
go_version=$(GOTOOLCHAIN=local "$go_bin" env GOVERSION)
key=$(cat "$src/go.mod" "$src/go.sum" <(echo "$go_version") | sha256sum | cut -c1-16)
cache="${AUTOTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/autotune}/controlplane/$key"
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

built() {
  local b
  for b in "${bins[@]}"; do [ -x "$cache/bin/$b" ] || return 1; done
  [ -f "$cache/crd/kwok.x-k8s.io_logs.yaml" ]
}

if [ "${1:-}" = "--where" ]; then
  built && { echo "$cache/bin"; exit 0; }
  exit 1
fi
# kustomize too, for tests/kubernetes/test_deploy_manifests.py: its own script and cache (keyed
# by its version), ~2 minutes the first time. On stderr: this script's stdout stays the control
# plane's directory, which tests/controlplane/cluster.py reads.
"$here/scripts/kustomize.sh" >&2
if built; then
  echo "$cache/bin"
  exit 0
fi

k8s_version=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$src/go.mod")
minor=$(echo "$k8s_version" | cut -d. -f2)
echo "building the test control plane (kubernetes $k8s_version, $go_version) into $cache ..." >&2
started=$(date +%s)
tmp="$cache.tmp.$$"
rm -rf "$tmp" && mkdir -p "$tmp/bin"
trap 'rm -rf "$tmp"' EXIT
# -X: what the components report as their version (kubectl version, /version); -s -w: no symbols.
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
(
  cd "$src"
  export GOTOOLCHAIN=local GOFLAGS=-mod=readonly CGO_ENABLED=0
  "$go_bin" build -trimpath -ldflags "$ldflags" -o "$tmp/bin/etcd" go.etcd.io/etcd/server/v3
  "$go_bin" build -trimpath -ldflags "$ldflags" -o "$tmp/bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler sigs.k8s.io/kwok/cmd/kwok
  # kwok's Logs CRD (data of the module we build, not our code): kwok serves a pod's log from
  # a file named by a Logs object, through the kubelet's own CRI log reader.
  mkdir -p "$tmp/crd"
  cp "$("$go_bin" list -m -f '{{.Dir}}' sigs.k8s.io/kwok)/kustomize/crd/bases/kwok.x-k8s.io_logs.yaml" \
    "$tmp/crd/"
)
echo "kubernetes $k8s_version, built with $go_version in $(( $(date +%s) - started ))s" \
  > "$tmp/VERSION"
rm -rf "$cache" && mv "$tmp" "$cache"
trap - EXIT
echo "built in $(( $(date +%s) - started ))s" >&2
echo "$cache/bin"
