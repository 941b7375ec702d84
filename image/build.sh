#!/usr/bin/env bash
# Build the image from the Dockerfile users build, the way this kind of machine allows: buildah
# without a daemon, chroot isolation (no nested namespaces under gVisor), the host's network, and
# Docker format (OCI format drops HEALTHCHECK). pip in the build stage gets this machine's index
# configuration and CA bundle through read-only mounts (see pip_context.py), never a layer.
#
#   image/build.sh [TAG] [buildah bud arguments...]     e.g. image/build.sh x --build-arg ENGINES=openai
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${1:-localhost/extractor:latest}
shift || true
PYTHON=${PYTHON:-python3}

# buildah's default open-files limit exceeds the hard limit here: ask for what is allowed.
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] && hard=1048576
nofile=$(( hard < 65536 ? hard : 65536 ))

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
mapfile -t pip_args < <("$PYTHON" image/pip_context.py "$context")

buildah bud --isolation chroot --network host --format docker --layers \
    --ulimit "nofile=$nofile:$nofile" "${pip_args[@]}" "$@" --tag "$TAG" .
