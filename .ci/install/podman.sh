#!/usr/bin/env bash
# podman (runc as its runtime) and debootstrap for the container image test
# (tests/test_image.py), CNI's dnsname plugin so that compose services find each other by
# name (tests/test_compose.py runs docker-compose on podman), then the Debian-made base image
# (.ci/image/base.sh: one to three minutes the first time, then cached outside the clone). Nothing
# is started here; the test writes its own containers.conf (this machine's ulimits). Idempotent.
set -euo pipefail
missing=()
command -v podman >/dev/null 2>&1 || missing+=(podman)
command -v runc >/dev/null 2>&1 || missing+=(runc)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
[ -x /usr/lib/cni/dnsname ] || missing+=(golang-github-containernetworking-plugin-dnsname)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "podman: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
started=$SECONDS
tag="$(bash "$(dirname "$0")/../image/base.sh")"
echo "podman: base image $tag ($((SECONDS - started)) s)"
