#!/usr/bin/env bash
# Build debian:bookworm-slim locally with mmdebstrap, from this machine's own apt sources, so CI
# builds the Dockerfile users build without reaching Docker Hub. Skipped when the image exists.
#
# It follows what the official slim image does (debuerreotype): a minbase system with merged
# /usr through usr-is-merged (apt alone would pick usrmerge and drag in 46 MB of perl), no docs,
# man pages or translations, and its apt configuration: downloaded .debs deleted after each
# install (without it the image kept 117 MB of them), no translations, gzipped indexes.
# Machine-specific apt settings (a snapshot mirror whose Release files have expired, a proxy) go
# into this local base only, never into the Dockerfile.
set -euo pipefail

IMAGE=${BASE_IMAGE:-docker.io/library/debian:bookworm-slim}
SUITE=${SUITE:-bookworm}

if podman image exists "$IMAGE"; then
    echo "base image $IMAGE is present; not rebuilding"
    exit 0
fi

# The machine's enabled sources, as apt reads them (files renamed to *.disabled are not).
sources=()
for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -s "$file" ] && sources+=("$file")
done
[ ${#sources[@]} -gt 0 ] || { echo "no apt sources found under /etc/apt" >&2; exit 1; }

# The apt settings that decide whether fetching works here at all.
aptopts=()
while IFS= read -r line; do
    aptopts+=(--aptopt="$line")
done < <(apt-config dump | grep -E '^Acquire::(Check-Valid-Until|Check-Date|https?::Proxy) ' || true)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The files debuerreotype puts in the official image's /etc/apt/apt.conf.d.
mkdir "$work/apt.conf.d"
cat >"$work/apt.conf.d/docker-clean" <<'CONF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CONF
echo 'Apt::AutoRemove::SuggestsImportant "false";' >"$work/apt.conf.d/docker-autoremove-suggests"
echo 'Acquire::GzipIndexes "true";' >"$work/apt.conf.d/docker-gzip-indexes"
echo 'Acquire::Languages "none";' >"$work/apt.conf.d/docker-no-languages"

mmdebstrap --variant=minbase --format=tar --quiet \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    "${aptopts[@]}" \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' \
    --dpkgopt='path-exclude=/usr/share/lintian/*' \
    --customize-hook="copy-in $work/apt.conf.d/docker-clean $work/apt.conf.d/docker-autoremove-suggests $work/apt.conf.d/docker-gzip-indexes $work/apt.conf.d/docker-no-languages /etc/apt/apt.conf.d" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/var/cache/apt/archives/*.deb "$1"/var/log/*.log' \
    "$SUITE" "$work/rootfs.tar" "${sources[@]}"

podman import --quiet \
    --change 'CMD ["bash"]' \
    --change 'LABEL org.opencontainers.image.description="debian:bookworm-slim rebuilt locally with mmdebstrap"' \
    "$work/rootfs.tar" "$IMAGE" >/dev/null
echo "built base image $IMAGE ($(podman image inspect --format '{{.Size}}' "$IMAGE") bytes)"
