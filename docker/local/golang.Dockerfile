# A stand-in for Docker Hub's golang:VERSION-bookworm: the local Debian base
# (docker/local/bases.sh) with the host's Go toolchain. Build context: GOROOT.
ARG BASE=kinflow-local/debian:bookworm-slim
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git \
 && rm -rf /var/lib/apt/lists/*
COPY . /usr/local/go
ENV GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
WORKDIR /go
