#!/usr/bin/env bash
# PostgreSQL for the storage, contract and multi-replica suites (tests/pg_cluster.py starts
# its own server from these binaries; nothing is started here). Idempotent.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql
# Debian's package starts a cluster of its own; the tests do not use it.
if command -v pg_lsclusters >/dev/null 2>&1; then
  pg_lsclusters -h 2>/dev/null | while read -r version name _; do
    pg_ctlcluster "$version" "$name" stop 2>/dev/null || true
  done
fi
