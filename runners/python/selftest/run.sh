#!/usr/bin/env bash
# Run the plugin's selftest suite inside the sandbox image, exactly as a grade runs a phase,
# and check events.jsonl against expected.json.
#
#   runners/python/selftest/run.sh <image-tag>
#
# Exit 0 when the events match; non-zero with the differences (and pytest's output) otherwise.
# Set INFRADEV_SELFTEST_KEEP=1 to keep the work dir (its path is printed).
set -euo pipefail

tag="${1:?usage: run.sh <image-tag>}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
lib="$(dirname "$here")"

command -v docker >/dev/null 2>&1 || { echo "selftest: docker CLI not found" >&2; exit 2; }
docker image inspect "$tag" >/dev/null 2>&1 || { echo "selftest: image $tag not found (build it with runners/base-image/build.sh)" >&2; exit 2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/infradev-selftest.XXXXXX")"
name="infradev-selftest-$$-$RANDOM"
cleanup() {
    docker rm -f "$name" >/dev/null 2>&1 || true
    if [ "${INFRADEV_SELFTEST_KEEP:-}" = 1 ]; then echo "selftest: kept $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

# Copies readable by uid 65534 whatever the checkout's permissions are.
mkdir -p "$work/lib" "$work/repo" "$work/out"
cp "$lib/infradev_pytest.py" "$lib/infradev_guard.py" "$lib/pytest.ini" "$work/lib/"
cp -R "$here/tests" "$here/fake_torch" "$work/repo/"
cp "$here/spec.json" "$work/spec.json"
chmod -R a+rX "$work/lib" "$work/repo" "$work/spec.json"
chmod 0777 "$work/out"

set +e
timeout 300 docker run --rm --name "$name" --network none --read-only --tmpfs /tmp \
    -v "$work/lib:/infradev/lib:ro" \
    -v "$work/repo:/infradev/repo:ro" \
    -v "$work/out:/infradev/out" \
    -v "$work/spec.json:/infradev/spec.json:ro" \
    --user 65534:65534 -w /infradev/repo \
    -e PYTHONPATH=/infradev/lib:/infradev/repo \
    -e INFRADEV_SPEC=/infradev/spec.json \
    -e INFRADEV_EVENTS=/infradev/out/events.jsonl \
    -e PYTHONDONTWRITEBYTECODE=1 -e PYTHONNOUSERSITE=1 \
    -e PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 \
    -e HOME=/tmp -e TMPDIR=/tmp -e PATH=/usr/local/bin:/usr/bin:/bin \
    "$tag" \
    python3 -m pytest -c /infradev/lib/pytest.ini --rootdir=/infradev/repo \
        -p infradev_pytest -p no:cacheprovider -q . >"$work/pytest.log" 2>&1
rc=$?
set -e

if [ "$rc" -ge 124 ] && [ ! -s "$work/out/events.jsonl" ]; then
    tail -n 40 "$work/pytest.log" >&2
    echo "selftest: docker run failed (exit $rc) before any event was written" >&2
    exit 1
fi

if ! python3 "$here/check.py" "$here/expected.json" "$work/out/events.jsonl" "$rc"; then
    echo "--- pytest output (tail) ---" >&2
    tail -n 60 "$work/pytest.log" >&2
    echo "--- events.jsonl ---" >&2
    cat "$work/out/events.jsonl" >&2 || true
    exit 1
fi
if [ -n "${INFRADEV_SELFTEST_SHOW:-}" ]; then cat "$work/out/events.jsonl"; fi
