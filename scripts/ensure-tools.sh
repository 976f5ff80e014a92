#!/usr/bin/env bash
# Make sure the system tools are present (Debian/Ubuntu packages), installing them when we are
# root and may; otherwise print the exact command.
#   scripts/ensure-tools.sh         the local stack: stress-ng, prometheus (make demo)
#   scripts/ensure-tools.sh test    also what the tests use: openssl (the test control plane's
#                                   keys), iproute2 (a pod address on lo), util-linux (unshare:
#                                   PID namespaces), postgresql (initdb/pg_ctl, off PATH in
#                                   /usr/lib/postgresql/<version>/bin), chromium (headless:
#                                   report.html checked in a real browser)
set -euo pipefail
missing=()
command -v stress-ng >/dev/null 2>&1 || [ -n "${AUTOTUNE_STRESS_NG:-}" ] || missing+=(stress-ng)
command -v prometheus >/dev/null 2>&1 || [ -n "${AUTOTUNE_PROMETHEUS:-}" ] || missing+=(prometheus)
if [ "${1:-}" = "test" ]; then
  command -v openssl >/dev/null 2>&1 || missing+=(openssl)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
  command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
    || missing+=(postgresql)
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
fi
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
