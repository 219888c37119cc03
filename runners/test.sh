#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs and starts what the tests need
# (Docker Engine, the base image, Debian's pytest for the local executor), then runs
# formatting, lints and every test. Tests that need Docker fail, never skip, under CI=true.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v git >/dev/null 2>&1 || missing+=(git)
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || missing+=(python3-pytest)
/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1 || missing+=(python3-numpy)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
# The grade pages and the dashboard are tested in a real headless browser (tests/pages.rs).
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
if ((${#missing[@]})); then
  echo "test: installing ${missing[*]} from Debian's packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
runners/ensure-docker.sh
runners/base-image/build.sh >/dev/null
# Debian trixie (Python 3.13) for the tasks that need it (megatron-prefix-cache-lru); doctor
# checks every base image a task names.
INFRADEV_BASE_SUITE=trixie runners/base-image/build.sh >/dev/null
# The Slurm test cluster's image (from the base image and Debian's Slurm packages), for the
# scale-out stories that run grades on a real cluster.
runners/slurm/build-image.sh >/dev/null

# A PostgreSQL test cluster for the store tests, which run on SQLite and on PostgreSQL.
INFRADEV_TEST_PG_URL=$(runners/ensure-postgres.sh)
export INFRADEV_TEST_PG_URL

cargo fmt --all -- --check

# The Python side of the sandboxes: the wire codec, the subject's server, the judge's library
# and plugin, the probe-symbol linter (Debian's python3 with pytest and numpy, as in the image).
/usr/bin/python3 -m pytest -q -p no:cacheprovider runners/python/tests

# The task suite: every manifest and every prompt checked, and one real task validated end to
# end (base, reference ×3, null patch). Validation is mostly downloads and image layers, so it
# runs in the background while the tests build and run; its log is printed at the end.
# The default task is validated from PyPI release sdists pinned by SHA-256; the git-sourced
# tasks need a clone of their upstream repository, which CI cannot reach.
VALIDATE_TASK=${VALIDATE_TASK:-vllm-kv-offload-lru}
cargo build --locked --bin infradev
mkdir -p target/task-suite
cp target/debug/infradev target/task-suite/infradev
target/task-suite/infradev tasks check
target/task-suite/infradev tasks lint --all
(
  rc=0
  target/task-suite/infradev tasks validate "$VALIDATE_TASK" --out-dir target/task-suite \
    >target/task-suite/validate.log 2>&1 || rc=$?
  echo "$rc" >target/task-suite/validate.rc
) &
validate=$!

cargo clippy --all-targets --locked -- -D warnings
cargo test --all-targets --locked

wait "$validate"
cat target/task-suite/validate.log
if [ "$(cat target/task-suite/validate.rc)" != 0 ]; then
  echo "test: task $VALIDATE_TASK did not validate" >&2
  exit 1
fi

# The wire codec's torch cases (tensors, dtypes, devices) need torch, which the host's Python
# lacks: run the wire tests again in the torch layer the validation just built, where a missing
# torch fails instead of skipping.
layer=$(docker images --format '{{.Repository}}:{{.Tag}}' --filter 'reference=infradev-layer/torch-2.8:*' | head -n 1)
if [ -z "$layer" ]; then
  echo "test: no infradev-layer/torch-2.8 image after validating $VALIDATE_TASK" >&2
  exit 1
fi
docker run --rm --network none -e INFRADEV_REQUIRE_TORCH=1 -v "$PWD/runners/python:/src:ro" -w /src \
  "$layer" python3 -m pytest -q -p no:cacheprovider tests/test_wire.py
