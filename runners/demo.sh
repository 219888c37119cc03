#!/usr/bin/env bash
# The main job on the embedded defaults: local Docker, the example task, three submissions.
set -euo pipefail
cd "$(dirname "$0")/.."
runners/ensure-docker.sh
runners/base-image/build.sh >/dev/null
exec cargo run --quiet --release -- demo "$@"
