#!/usr/bin/env bash
# Build the InfraDev sandbox base image (Debian + python3 + python3-pytest + python3-pip)
# without a container registry: debootstrap a minbase rootfs and `docker import` it.
#
#   runners/base-image/build.sh [TAG]
#   INFRADEV_BASE_SUITE=trixie runners/base-image/build.sh   # Python 3.13 instead of 3.11
#
# TAG defaults to infradev-base:bookworm-<first 12 hex of sha256 of this script>, so editing the
# script yields a new tag. If TAG already exists the build is skipped. The image is also tagged
# infradev-base:bookworm (stable alias). The tag is printed on stdout as the last line; progress
# goes to stderr.
#
# The Debian mirror is taken from this machine's apt configuration (deb822 `URIs:` of the entry
# whose Suites include bookworm, else /etc/apt/sources.list); INFRADEV_DEBIAN_MIRROR overrides it.
set -euo pipefail

readonly SUITE="${INFRADEV_BASE_SUITE:-bookworm}"
case "$SUITE" in bookworm | trixie) ;; *) echo "build.sh: error: INFRADEV_BASE_SUITE must be bookworm or trixie" >&2; exit 1 ;; esac
readonly ALIAS="infradev-base:${SUITE}"
readonly PACKAGES="python3,python3-pytest,python3-pip"

log() { printf 'build.sh: %s\n' "$*" >&2; }
die() { printf 'build.sh: error: %s\n' "$*" >&2; exit 1; }

script_path="$(readlink -f "${BASH_SOURCE[0]}")"
script_sha="$(sha256sum "$script_path" | cut -c1-12)"
tag="${1:-infradev-base:${SUITE}-${script_sha}}"

command -v docker >/dev/null 2>&1 || die "docker CLI not found on PATH"
if ! docker_err="$(docker info --format '{{.ServerVersion}}' 2>&1 >/dev/null)"; then
    die "cannot reach the Docker daemon (is dockerd running, DOCKER_HOST right, the socket readable?): ${docker_err}"
fi

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

finish_cached() {
    if [ "$tag" != "$ALIAS" ]; then docker tag "$tag" "$ALIAS" >/dev/null; fi
    log "image $tag already present (cached)"
    printf '%s\n' "$tag"
    exit 0
}

if image_exists "$tag"; then finish_cached; fi

[ "$(id -u)" -eq 0 ] || die "debootstrap needs root; run as root (or via sudo)"

work_root="${TMPDIR:-/tmp}"
mkdir -p "$work_root"

# One build at a time on this host; a second caller waits and then finds the image cached.
exec 9>"$work_root/infradev-base-image.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
    if image_exists "$tag"; then finish_cached; fi
fi

work="$(mktemp -d "$work_root/infradev-base.XXXXXX")"
cleanup() {
    local rc=$?
    # debootstrap mounts /proc and /sys inside the target; unmount leftovers (deepest first).
    if [ -r /proc/mounts ]; then
        awk -v w="$work/" 'index($2, w) == 1 { print $2 }' /proc/mounts | sort -r |
            while read -r m; do umount -l "$m" 2>/dev/null || true; done
    fi
    rm -rf --one-file-system "$work" 2>/dev/null || rm -rf "$work" || true
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the mirror, from this machine's apt configuration -----------------------------------------
mirror_from_deb822() {
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        awk -v suite="$1" '
            function flush() {
                if (uri != "" && has_deb && has_suite && enabled != "no" && !found) { print uri; found = 1 }
                uri = ""; has_deb = 0; has_suite = 0; enabled = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            {
                key = tolower($1); sub(/:$/, "", key)
                if (key == "types")   { for (i = 2; i <= NF; i++) if ($i == "deb") has_deb = 1 }
                if (key == "suites")  { for (i = 2; i <= NF; i++) if ($i == suite) has_suite = 1 }
                if (key == "uris")    { for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):/) { uri = $i; break } }
                if (key == "enabled") { enabled = tolower($2) }
            }
            END { flush() }
        ' "$f"
    done | head -n1
}
mirror_from_list() {
    local f
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -r "$f" ] || continue
        # deb [opts] URI suite components...
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
            awk -v suite="$1" '$1 == "deb" && $3 == suite && $2 ~ /^(https?|file):/ { print $2; exit }'
    done | head -n1
}

mirror="${INFRADEV_DEBIAN_MIRROR:-}"
[ -n "$mirror" ] || mirror="$(mirror_from_deb822 "$SUITE")"
[ -n "$mirror" ] || mirror="$(mirror_from_list "$SUITE")"
# The archive that serves bookworm serves every suite.
[ -n "$mirror" ] || [ "$SUITE" = bookworm ] || mirror="$(mirror_from_deb822 bookworm)"
[ -n "$mirror" ] || [ "$SUITE" = bookworm ] || mirror="$(mirror_from_list bookworm)"
[ -n "$mirror" ] || die "no '$SUITE' entry in /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list; set INFRADEV_DEBIAN_MIRROR"

# debootstrap fetches with wget, which ignores apt's proxy setting: carry it over.
if [ -z "${http_proxy:-}" ] && command -v apt-config >/dev/null 2>&1; then
    apt_proxy=""
    eval "$(apt-config shell apt_proxy Acquire::http::Proxy)"
    if [ -n "$apt_proxy" ] && [ "$apt_proxy" != "DIRECT" ]; then export http_proxy="$apt_proxy"; fi
fi

# --- debootstrap --------------------------------------------------------------------------------
if ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >"$work/apt.log" 2>&1 &&
        apt-get install -y -qq --no-install-recommends debootstrap >>"$work/apt.log" 2>&1 ||
        { tail -n 30 "$work/apt.log" >&2; die "could not install debootstrap"; }
fi

rootfs="$work/rootfs"
start=$SECONDS
log "debootstrap --variant=minbase $SUITE ($PACKAGES) from the apt mirror; this takes a minute or two"
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -n 40 "$work/debootstrap.log" >&2
    [ -r "$rootfs/debootstrap/debootstrap.log" ] && tail -n 40 "$rootfs/debootstrap/debootstrap.log" >&2
    die "debootstrap failed (log above)"
fi
log "debootstrap done in $((SECONDS - start)) s"

# Slim the tree: package caches and indexes are not needed to run tests.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/cache/apt/*.bin \
       "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/* "$rootfs"/debootstrap 2>/dev/null || true
grep -q '^nobody:x:65534:65534:' "$rootfs/etc/passwd" || die "rootfs has no user nobody (65534)"

# --- import -------------------------------------------------------------------------------------
log "importing rootfs as $tag"
tar --numeric-owner -C "$rootfs" -c . |
    docker import \
        --change "LABEL org.infradev.suite=$SUITE" \
        --change "LABEL org.infradev.build-script-sha256=$script_sha" \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        - "$tag" >/dev/null

# --- verify -------------------------------------------------------------------------------------
if ! check="$(docker run --rm --network none --user 65534:65534 "$tag" \
        python3 -c 'import os, pwd, sys, pytest; assert os.getuid() == 65534, os.getuid(); print(pwd.getpwuid(65534).pw_name, sys.version.split()[0], pytest.__version__)' 2>&1)"; then
    docker image rm -f "$tag" >/dev/null 2>&1 || true
    die "image verification failed: $check"
fi
log "verified: user/python/pytest = $check"

if [ "$tag" != "$ALIAS" ]; then docker tag "$tag" "$ALIAS" >/dev/null; fi
log "built $tag (alias $ALIAS) in $((SECONDS - start)) s"
printf '%s\n' "$tag"
