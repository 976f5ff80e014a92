#!/usr/bin/env bash
# Make sure the local stack's system tools are present: stress-ng and prometheus (Debian/Ubuntu
# packages). Installs them when we are root and may; otherwise prints the exact command.
set -euo pipefail
missing=()
command -v stress-ng >/dev/null 2>&1 || [ -n "${AUTOTUNE_STRESS_NG:-}" ] || missing+=(stress-ng)
command -v prometheus >/dev/null 2>&1 || [ -n "${AUTOTUNE_PROMETHEUS:-}" ] || missing+=(prometheus)
[ ${#missing[@]} -eq 0 ] && exit 0
cmd="apt-get update && apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} ..."
  sh -c "$cmd"
else
  echo "missing: ${missing[*]}. Install them with:" >&2
  echo "  sudo sh -c '$cmd'" >&2
  exit 1
fi
