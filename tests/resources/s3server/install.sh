#!/usr/bin/env bash
# Build the S3-compatible server the tiered-storage tests run: the Versity S3 Gateway
# (github.com/versity/versitygw, Apache-2.0; a real S3 API server over a POSIX directory), with
# `go install` from the Go module proxy, into a cache outside the repository. Prints the binary's path.
#   tests/resources/s3server/install.sh
# Exit status: 0 built (or already built), 3 the Go module proxy could not be reached or the build
# failed to download, 4 no Go toolchain (and none could be installed), other: the build failed.
set -euo pipefail
version=${MAGNETAR_S3SERVER_VERSION:-v1.8.0}  # needs Go >= 1.25
cache=${MAGNETAR_S3SERVER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/magnetar/s3server}/$version
bin="$cache/bin/versitygw"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
if ! command -v go >/dev/null; then
  for dir in /usr/local/go/bin /usr/lib/go/bin; do
    [ -x "$dir/go" ] && PATH="$dir:$PATH" && break
  done
fi
command -v go >/dev/null || { echo "go is not installed (the tiered-storage tests build their S3 server with it)" >&2; exit 4; }
mkdir -p "$cache"
log="$cache/build.log"
# a private GOPATH bin, the shared module cache; GOFLAGS as the machine sets them
if ! GOBIN="$cache/bin" go install "github.com/versity/versitygw/cmd/versitygw@$version" >"$log" 2>&1; then
  cat "$log" >&2
  if grep -qiE "dial tcp|no such host|connection refused|i/o timeout|TLS handshake|proxyconnect" "$log"; then
    exit 3
  fi
  exit 1
fi
echo "$bin"
