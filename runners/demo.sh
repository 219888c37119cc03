#!/usr/bin/env bash
# The main job on the embedded defaults: local Docker, the example task, three submissions.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "demo: checking Docker and the base image (built once from Debian packages: a few minutes)" >&2
runners/ensure-docker.sh
runners/base-image/build.sh >/dev/null
# cargo's own progress stays on: a cold release build takes 10-30 minutes on 2 cores, and a
# silent terminal for that long reads as a hang. A warm one takes seconds.
echo "demo: building infradev (cargo build --release; the first build is the long part)" >&2
cargo build --release --bin infradev
echo "demo: grading the example task's three submissions" >&2
exec target/release/infradev demo "$@"
