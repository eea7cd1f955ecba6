#!/usr/bin/env bash
# Builds the steward image (default tag steward:local) FROM scratch: the steward binary and the
# shared libraries it links, copied from this machine, are the whole file system. No base image
# is pulled. Usage:
#   cluster-configs/docker/build-image.sh [BINARY] [TAG]
# BINARY defaults to target/release/steward, built with `cargo build --release` when missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
binary="${1:-$root/target/release/steward}"
tag="${2:-steward:local}"
if [ ! -x "$binary" ]; then
    if [ $# -ge 1 ]; then
        echo "build-image.sh: $binary is not an executable" >&2
        exit 2
    fi
    (cd "$root" && cargo build --release --bin steward)
fi
context="$(mktemp -d)"
trap 'rm -rf "$context"' EXIT
mkdir -p "$context/rootfs/usr/local/bin" "$context/rootfs/etc/steward" \
    "$context/rootfs/var/lib/steward" "$context/rootfs/tmp"
cp "$binary" "$context/rootfs/usr/local/bin/steward"
# The dynamic loader and every library ldd resolves, at the same paths.
for lib in $(ldd "$binary" | grep -oE '/[^ ]+\.so[^ ]*'); do
    mkdir -p "$context/rootfs$(dirname "$lib")"
    cp -L "$lib" "$context/rootfs$lib"
done
# Name resolution of the Compose service names goes through glibc's NSS: files and DNS.
printf 'hosts: files dns\n' > "$context/rootfs/etc/nsswitch.conf"
for nss in libnss_dns.so.2 libnss_files.so.2 libresolv.so.2; do
    found="$(ldconfig -p | grep -m1 -oE "/[^ ]*/$nss$" || true)"
    if [ -n "$found" ]; then
        mkdir -p "$context/rootfs$(dirname "$found")"
        cp -L "$found" "$context/rootfs$found"
    fi
done
cp "$here/Dockerfile" "$context/Dockerfile"
docker build -q -t "$tag" "$context" >/dev/null
echo "built $tag"
