#!/usr/bin/env bash
# A Debian bookworm base image for the Dockerfile (podman build --build-arg BASE=...), made
# with debootstrap from Debian's packages, for machines where no container registry serves
# python:3.11-slim-bookworm. It carries what the Dockerfile uses: CPython 3.11 with venv and
# pip (python3-venv), CA certificates, and useradd/groupadd (passwd, in minbase).
#
# Cached outside the clone, keyed by this recipe (the script less its comments): a changed
# recipe is a new base. $RUNSINK_CACHE/base-bookworm-KEY.tar (default /var/cache/runsink),
# imported into podman as localhost/runsink-base:bookworm-KEY, the tag this prints.
# The first run takes one to three minutes (debootstrap); later ones well under a second.
# Needs root, debootstrap and podman (.ci/install/podman.sh).
set -euo pipefail
key="$(grep -v '^[[:space:]]*#' "$0" | sha256sum | cut -c1-12)"
tag="localhost/runsink-base:bookworm-$key"
cache_dir="${RUNSINK_CACHE:-/var/cache/runsink}"
tarball="$cache_dir/base-bookworm-$key.tar"

if podman image exists "$tag"; then
  echo "$tag"
  exit 0
fi
if [ ! -s "$tarball" ]; then
  root="$(mktemp -d)"
  trap 'rm -rf "$root" "$root.log"' EXIT
  echo "base: debootstrap bookworm into $root" >&2
  if ! debootstrap --variant=minbase --include=python3-venv,ca-certificates bookworm "$root" \
    >"$root.log" 2>&1; then
    tail -n 30 "$root.log" >&2
    exit 1
  fi
  # Package caches and documentation are not needed to run anything: half the size.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* \
    "$root"/usr/share/doc "$root"/usr/share/man "$root"/usr/share/locale "$root"/debootstrap
  mkdir -p "$cache_dir"
  rm -f "$cache_dir"/base-bookworm-*.tar # earlier recipes
  tar --numeric-owner -C "$root" -cf "$tarball.partial" .
  mv "$tarball.partial" "$tarball"
fi
podman import --quiet --change 'CMD ["/bin/bash"]' "$tarball" "$tag" >/dev/null
echo "$tag"
