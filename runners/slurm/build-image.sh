#!/usr/bin/env bash
# Build the Slurm test-cluster image FROM the InfraDev base image (no registry): run a build
# container on the host network, apt-get install Debian bookworm's Slurm + munge, `docker commit`.
#
#   runners/slurm/build-image.sh [TAG]
#
# TAG defaults to infradev-slurm:bookworm-<12 hex of sha256(this script + base image id)>; if it
# exists the build is skipped. Also tagged infradev-slurm:bookworm. Prints the tag last on stdout.
# The base image (infradev-base:bookworm) is built by runners/base-image/build.sh when missing.
set -euo pipefail

readonly ALIAS="infradev-slurm:bookworm"
readonly BASE="infradev-base:bookworm"
readonly PACKAGES="munge slurmctld slurmd slurm-client git python3-pytest procps iproute2 hostname"

log() { printf 'build-image.sh: %s\n' "$*" >&2; }
die() { printf 'build-image.sh: error: %s\n' "$*" >&2; exit 1; }

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
docker info >/dev/null 2>&1 || die "cannot reach the Docker daemon (try runners/ensure-docker.sh)"

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    log "base image $BASE missing; building it"
    "$here/../base-image/build.sh" >/dev/null
fi
base_id="$(docker image inspect --format '{{.Id}}' "$BASE")"
sha="$( { sha256sum <"${BASH_SOURCE[0]}"; printf '%s\n' "$base_id"; } | sha256sum | cut -c1-12)"
tag="${1:-infradev-slurm:bookworm-$sha}"

if docker image inspect "$tag" >/dev/null 2>&1; then
    [ "$tag" = "$ALIAS" ] || docker tag "$tag" "$ALIAS"
    log "image $tag already present (cached)"
    printf '%s\n' "$tag"
    exit 0
fi

builder="infradev-slurm-build-$$"
trap 'docker rm -f "$builder" >/dev/null 2>&1 || true' EXIT
start=$SECONDS
log "installing $PACKAGES into $BASE (apt-get, host network)"
# The Debian postinst generates /etc/munge/munge.key; drop it so no key is baked into the image
# (cluster.sh installs a fresh one per cluster).
if ! docker run --name "$builder" --network host "$BASE" sh -ec "
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends $PACKAGES >/dev/null
        apt-get clean
        rm -rf /var/lib/apt/lists/* /etc/munge/munge.key
        install -d -o slurm -g slurm /var/lib/slurm/slurmctld /var/lib/slurm/slurmd /var/log/slurm
    " >&2; then
    die "package installation failed (output above)"
fi
docker commit \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL org.infradev.slurm-build-sha=$sha org.infradev.base-image=$base_id" \
    "$builder" "$tag" >/dev/null

check="$(docker run --rm --network none "$tag" sh -c \
    'slurmctld -V && munged --version 2>&1 | head -n1 && git --version && python3 -m pytest --version 2>&1')" ||
    { docker image rm -f "$tag" >/dev/null 2>&1 || true; die "image verification failed: $check"; }
log "verified: $(printf '%s' "$check" | tr '\n' ';')"
[ "$tag" = "$ALIAS" ] || docker tag "$tag" "$ALIAS"
log "built $tag (alias $ALIAS) in $((SECONDS - start)) s"
printf '%s\n' "$tag"
