#!/usr/bin/env bash
# Build the example upstream repository "minicache" as a git repository at DEST.
#
#   main (= base)            minicache: base
#   tag base                 the base commit
#   tag reference            base + reference.patch (prefix caching, with the new official tests)
#   submission/<name>        base + submissions/<name>.patch or hostile/<name>.patch
#   submission/<name>        base + attacks/<name>.patch (the red team's, tests/redteam.rs)
#   submission/<name>        base + wrong/<name>.patch (hand-written wrong patches, tests/power.rs)
#
# The result is bit-for-bit reproducible: fixed identity and dates, file modes forced to 0644,
# and the user's and the system's git configuration ignored. Every run produces the same SHAs.
set -euo pipefail

usage() { echo "usage: $0 DEST" >&2; exit 2; }
[ "$#" -eq 1 ] || usage
DEST=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ -e "$DEST" ] && [ -n "$(ls -A "$DEST" 2>/dev/null)" ]; then
    echo "$0: $DEST exists and is not empty" >&2
    exit 1
fi

# Hermetic git: no global/system config, no inherited repository or identity variables.
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES \
      GIT_CEILING_DIRECTORIES GIT_NAMESPACE GIT_TEMPLATE_DIR GIT_CONFIG GIT_CONFIG_PARAMETERS \
      GIT_CONFIG_COUNT 2>/dev/null || true
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME="InfraDev Example" GIT_AUTHOR_EMAIL="example@infradev.invalid"
export GIT_COMMITTER_NAME="InfraDev Example" GIT_COMMITTER_EMAIL="example@infradev.invalid"
export GIT_AUTHOR_DATE="2026-01-01T00:00:00+0000" GIT_COMMITTER_DATE="2026-01-01T00:00:00+0000"
export LC_ALL=C TZ=UTC
umask 022

git init -q -b main "$DEST"
DEST=$(cd "$DEST" && pwd)
g() { git -C "$DEST" "$@"; }
g config user.name "InfraDev Example"
g config user.email "example@infradev.invalid"
g config commit.gpgsign false
g config tag.gpgsign false
g config core.fileMode false
g config core.autocrlf false
g config core.eol lf
g config core.hooksPath /dev/null

normalise_modes() {
    find "$DEST" -path "$DEST/.git" -prune -o -type d -exec chmod 0755 {} + -o -type f -exec chmod 0644 {} +
}

commit_all() {
    normalise_modes
    g add -A
    g commit -q --no-verify -m "$1"
}

apply_patch() {
    g apply --whitespace=nowarn "$1"
}

# Copy base/ without any bytecode or caches a local test run may have left there.
(cd "$HERE/base" && tar -cf - --exclude=__pycache__ --exclude=.pytest_cache --exclude='*.pyc' .) |
    (cd "$DEST" && tar -xf - --no-same-owner)
commit_all "minicache: base"
g tag base

g checkout -q --detach base
apply_patch "$HERE/reference.patch"
commit_all "minicache: prefix caching (reference)"
g tag reference

for patch in "$HERE"/submissions/*.patch "$HERE"/hostile/*.patch "$HERE"/attacks/*.patch \
    "$HERE"/wrong/*.patch; do
    [ -e "$patch" ] || continue
    name=$(basename "$patch" .patch)
    g checkout -q -b "submission/$name" base
    apply_patch "$patch"
    commit_all "submission: $name"
done

g checkout -q main
