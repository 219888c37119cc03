#!/usr/bin/env bash
# Makes sure a Docker Engine answers on this machine: installs Debian's docker.io when the
# client is missing and starts dockerd by hand when nothing listens (there is no systemd here).
set -euo pipefail

if docker info >/dev/null 2>&1; then
  exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "ensure-docker: installing docker.io from Debian's packages" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io containerd runc iptables >/dev/null
fi
log=${TMPDIR:-/tmp}/infradev-dockerd.log
echo "ensure-docker: starting dockerd (log: $log)" >&2
nohup dockerd --bridge=none --iptables=false --ip-masq=false >"$log" 2>&1 &
for _ in $(seq 60); do
  if docker info >/dev/null 2>&1; then
    exit 0
  fi
  sleep 1
done
echo "ensure-docker: dockerd did not come up within 60 s; see $log" >&2
exit 1
