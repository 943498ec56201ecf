#!/usr/bin/env bash
# Build the Lakewarden image (Dockerfile at the top) with podman, or docker when podman is missing.
#   deploy/build-image.sh [TAG]        TAG defaults to lakewarden:latest
# 1. The Python packages are built into wheels on this machine first (deploy/wheelhouse, kept and
#    reused: a second build downloads nothing) and installed in the image without an index.
# 2. Without a registry (LAKEWARDEN_LOCAL_BASE=1, or when the base cannot be pulled), the Debian
#    base the Dockerfile names is made here with debootstrap and imported under that name.
set -euo pipefail
cd "$(dirname "$0")/.."
TAG=${1:-lakewarden:latest}
BASE=${LAKEWARDEN_BASE_IMAGE:-docker.io/library/debian:bookworm-slim}
ENGINE=${CONTAINER_ENGINE:-$(command -v podman >/dev/null && echo podman || echo docker)}
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
CACHE=${LAKEWARDEN_DEPLOY_CACHE:-var/deploy-cache}
say() { echo "build-image: $*" >&2; }

# --- the base image --------------------------------------------------------------------------------
if ! $ENGINE image exists "$BASE" 2>/dev/null && ! $ENGINE image inspect "$BASE" >/dev/null 2>&1; then
  if [ "${LAKEWARDEN_LOCAL_BASE:-0}" != 1 ] && $ENGINE pull -q "$BASE" >/dev/null 2>&1; then
    say "pulled $BASE"
  else
    command -v debootstrap >/dev/null || { echo "cannot pull $BASE and debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
    # the Debian mirror apt uses here: its active source files only (a file renamed to disable it,
    # or another vendor's repository, is not a Debian mirror); none found: Debian's own
    MIRROR=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null \
      | grep -oE '(URIs:|^deb) +https?://[^ ]+' | awk '{print $2}' | grep -E '/debian/?$' | head -n1 || true)
    MIRROR=${MIRROR:-http://deb.debian.org/debian}
    say "making $BASE with debootstrap from $MIRROR (about a minute)"
    mkdir -p "$CACHE"
    ROOTFS=$(mktemp -d "$CACHE/rootfs.XXXXXX")
    trap 'rm -rf "$ROOTFS"' EXIT
    debootstrap --variant=minbase bookworm "$ROOTFS" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
      || { tail -n 20 "$CACHE/debootstrap.log" >&2; exit 1; }
    rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/archives/*.deb
    tar -C "$ROOTFS" -c . | $ENGINE import - "$BASE" >/dev/null
    rm -rf "$ROOTFS"
    trap - EXIT
  fi
fi

# --- the wheelhouse ----------------------------------------------------------------------------------
# requirements.txt less what only development and the test suite use (deploy/image-excludes.txt, the
# Dockerfile's filter too), the plugins' libraries and deploy/image-extras.txt.
grep -viEf deploy/image-excludes.txt requirements.txt > deploy/wheelhouse/requirements-image.txt
grep -hvE '^\s*(#|$)' plugins/*/requirements.txt deploy/image-extras.txt >> deploy/wheelhouse/requirements-image.txt
HASH=$(sha256sum deploy/wheelhouse/requirements-image.txt | cut -c1-16)
# The wheels as an image of their own (under /tmp, where the Dockerfile's default has an empty
# folder): the build mounts them instead of copying them into a layer. An engine that already holds
# the image of these requirements (another checkout built it) needs no wheelhouse.
WHEELS="localhost/lakewarden-wheelhouse:$HASH"
if ! $ENGINE image inspect "$WHEELS" >/dev/null 2>&1; then
  if [ ! -f "deploy/wheelhouse/.built-$HASH" ]; then
    say "building the wheelhouse deploy/wheelhouse"
    "$PY" -m pip wheel -q --no-deps -w deploy/wheelhouse -r deploy/wheelhouse/requirements-image.txt "setuptools>=69,<81"
    rm -f deploy/wheelhouse/.built-*
    touch "deploy/wheelhouse/.built-$HASH"
  fi
  printf 'FROM scratch\nCOPY . /tmp/\n' | $ENGINE build -q --tag "$WHEELS" -f - deploy/wheelhouse >/dev/null
fi

# --- the image ---------------------------------------------------------------------------------------
say "building $TAG with $ENGINE"
ARGS=(build --tag "$TAG" --build-arg "BASE=$BASE" --build-arg "WHEELHOUSE=$WHEELS" --build-arg PIP_NO_INDEX=1)
if [ "$ENGINE" = podman ]; then
  # the docker format keeps HEALTHCHECK; runc and these limits: what this kind of machine allows
  ARGS+=(--format docker --runtime "${LAKEWARDEN_OCI_RUNTIME:-runc}" --ulimit nofile=1024:1024 --ulimit nproc=4096:4096 --network host --layers)
fi
$ENGINE "${ARGS[@]}" .
