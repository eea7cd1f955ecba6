#!/usr/bin/env bash
# Makes the certificates docker-compose.yml mounts, with `steward certs create`: a new CA, one
# certificate per node (common name steward-node-<id>, valid for its service name steward<id>,
# for localhost and for 127.0.0.1, where the host and the healthcheck dial it) and an `admin`
# client certificate. Usage:
#   cluster-configs/docker/gen-certs.sh [BINARY] [DIR] [MORE steward certs create FLAGS...]
# BINARY defaults to target/release/steward, built with `cargo build --release` when missing.
# DIR defaults to cluster-configs/docker/certs, where docker-compose.yml looks unless
# STEWARD_CERTS names another. Certificates already in DIR are kept (the command refuses) unless
# --force is among the flags, e.g. `gen-certs.sh "" "" --force --client ci-bot`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
binary="${1:-}"
out="${2:-$here/certs}"
shift "$(( $# < 2 ? $# : 2 ))"
if [ -z "$binary" ]; then
    binary="$root/target/release/steward"
    if [ ! -x "$binary" ]; then
        (cd "$root" && cargo build --release --bin steward)
    fi
elif [ ! -x "$binary" ]; then
    echo "gen-certs.sh: $binary is not an executable" >&2
    exit 2
fi
"$binary" certs create --out "$out" --nodes 3 \
    --host 'steward{id}' --host localhost --host 127.0.0.1 \
    --client admin "$@"
