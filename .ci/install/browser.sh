#!/usr/bin/env bash
# Chromium for the web UI's browser tests (tests/test_ui_browser.py). Playwright drives
# Debian's build through executable_path: its own browser download is not reachable here.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then
  exit 0
fi
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core
