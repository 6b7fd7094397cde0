#!/usr/bin/env bash
# The TypeScript client (clients/typescript) and its Playwright example (examples/playwright-signup),
# run by tests/test_typescript.py: Node.js + npm, Debian's Chromium (shared with browser.sh: the same
# package, installed once), and `npm ci` from the committed lockfiles. Playwright's own browser
# download is not reachable here, so it is skipped: the example launches /usr/bin/chromium.
# Idempotent: installs only what is missing or older than its lockfile.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if ! command -v chromium >/dev/null 2>&1 && [ ! -x /usr/bin/chromium ]; then
  missing+=(chromium fonts-dejavu-core)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "typescript: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
  # @playwright/test needs Node 20+ (the client itself runs on 18+).
  echo "typescript: node $(node --version) is older than 20, which @playwright/test needs" >&2
  exit 1
fi

for folder in clients/typescript examples/playwright-signup; do
  installed="$folder/node_modules/.package-lock.json"
  if [ ! -f "$installed" ] || [ "$folder/package-lock.json" -nt "$installed" ]; then
    echo "typescript: npm ci in $folder"
    (cd "$folder" && npm ci --no-audit --no-fund --loglevel=error)
  fi
done
echo "typescript: node $(node --version), npm $(npm --version), $(chromium --version 2>/dev/null || echo chromium)"
