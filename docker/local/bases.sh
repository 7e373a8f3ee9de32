#!/usr/bin/env bash
# Builds, from Debian's packages and this machine's Go toolchain, the base
# images that docker/Dockerfile and docker/compose.yaml pull from Docker Hub,
# for machines that reach Debian's mirror and the Go module proxy but no
# container registry (the project's CI and development machines), so that
# the container test runs there too:
#
#   kinflow-local/debian:bookworm-slim   debootstrap --variant=minbase bookworm
#   kinflow-local/golang:GOVER-bookworm  the Debian base + the host's Go (GOROOT)
#   kinflow-local/postgres:15            the Debian base + Debian's PostgreSQL 15,
#                                        with the official image's POSTGRES_USER,
#                                        POSTGRES_PASSWORD, POSTGRES_DB start-up
#
# and prints the variables that point the compose file at them
# (KINFLOW_DEBIAN_IMAGE, KINFLOW_GO_IMAGE, KINFLOW_POSTGRES_IMAGE). Idempotent:
# an image already present is kept. Needs root (debootstrap) and a running
# Docker engine. With registry access none of this is needed: the defaults are
# the Docker Hub images.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# The engine's own client where Debian installed it (see scripts/container-deps.sh).
docker=${DOCKER:-$(command -v /usr/bin/docker || command -v docker)}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
goroot=$(go env GOROOT)
gover=$(go env GOVERSION); gover=${gover#go}

debian=kinflow-local/debian:bookworm-slim
golang=kinflow-local/golang:${gover}-bookworm
postgres=kinflow-local/postgres:15

have() { "$docker" image inspect "$1" >/dev/null 2>&1; }
log() { echo "bases: $*" >&2; }

if ! have "$debian"; then
  log "debootstrap bookworm (minbase) from $mirror"
  start=$(date +%s)
  root=$(mktemp -d /var/tmp/kinflow-debootstrap.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
  cat > "$root/etc/apt/sources.list" <<SRC
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security bookworm-security main
SRC
  # As Docker Hub's slim image: no apt lists, caches or docs kept in layers.
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  printf 'APT::Install-Recommends "false";\n' > "$root/etc/apt/apt.conf.d/99no-recommends"
  # The host's own certificate authorities (an egress proxy's, a company's):
  # an image that installs ca-certificates trusts them as the host does, so
  # that `go mod download` and pip inside a build reach what the host reaches.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$root/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  fi
  tar -C "$root" -c . | "$docker" import --change 'CMD ["bash"]' - "$debian" >/dev/null
  rm -rf "$root"
  trap - EXIT
  log "$debian ready in $(( $(date +%s) - start ))s"
fi

if ! have "$golang"; then
  log "$golang from $goroot"
  start=$(date +%s)
  "$docker" build -q -t "$golang" --build-arg BASE="$debian" -f "$here/golang.Dockerfile" "$goroot" >/dev/null
  log "$golang ready in $(( $(date +%s) - start ))s"
fi

if ! have "$postgres"; then
  log "$postgres (Debian's PostgreSQL)"
  start=$(date +%s)
  "$docker" build -q -t "$postgres" --build-arg BASE="$debian" "$here/postgres" >/dev/null
  log "$postgres ready in $(( $(date +%s) - start ))s"
fi

echo "KINFLOW_DEBIAN_IMAGE=$debian"
echo "KINFLOW_GO_IMAGE=$golang"
echo "KINFLOW_POSTGRES_IMAGE=$postgres"
