#!/usr/bin/env bash
# docker compose's own check of docker-compose.yml (tests/test_compose.py): `docker compose`
# where Docker's plugin is installed, else Debian's docker-compose. No Docker engine is
# needed: `config` only reads and validates the file. Idempotent.
set -euo pipefail
if docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null 2>&1; then
  exit 0
fi
echo "compose: installing docker-compose"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-compose
