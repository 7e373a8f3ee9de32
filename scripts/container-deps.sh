#!/usr/bin/env bash
# Installs and starts what the container test (docker/compose_up_test.go,
# `make test-containers`) needs on a Debian machine without a container
# registry: Debian's Docker engine (docker.io), the compose tool
# (docker-compose, v1 as Debian packages it) and debootstrap for the local base
# images (docker/local/bases.sh). Starts dockerd when no engine answers
# (overlay2, or vfs where overlay mounts are refused). Idempotent. Needs root.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need=()
[ -x /usr/sbin/dockerd ] || need+=(docker.io)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
if [ ${#need[@]} -gt 0 ]; then
  echo "container-deps: installing ${need[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The engine's own client (/usr/bin/docker): another docker on PATH may lack
# the BuildKit builder this engine speaks.
client=/usr/bin/docker
if "$client" info >/dev/null 2>&1; then
  echo "container-deps: the Docker engine is running"
  exit 0
fi
log=/var/log/kinflow-dockerd.log
for driver in overlay2 vfs; do
  echo "container-deps: starting dockerd (storage driver $driver; log $log)"
  as_root sh -c "nohup /usr/sbin/dockerd --storage-driver $driver >>$log 2>&1 &"
  for _ in $(seq 1 60); do
    if "$client" info >/dev/null 2>&1; then
      echo "container-deps: the Docker engine is running ($driver)"
      exit 0
    fi
    if ! pgrep -x dockerd >/dev/null; then break; fi
    sleep 1
  done
  as_root pkill -x dockerd || true
  sleep 2
done
echo "container-deps: dockerd did not start; see $log" >&2
exit 1
