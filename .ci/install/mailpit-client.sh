#!/usr/bin/env bash
# The npm mailpit-api client that tests/test_mailpit_compat.py drives with Node (18+).
# Idempotent: installs Node and npm only when missing, the package only when absent.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm
fi
cd tests/mailpit_client
if [ ! -f node_modules/mailpit-api/package.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
node -e 'import("mailpit-api").then(() => console.log("mailpit-api ready"))'
