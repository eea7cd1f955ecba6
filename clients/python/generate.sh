#!/usr/bin/env bash
# Regenerates the Python stubs of steward's client API (proto/steward.proto, proto/errors.proto)
# into steward/v1/ with grpcio-tools (the pinned version of pyproject.toml's `dev` extra):
#
#   pip install -e './clients/python[dev]'   # once
#   clients/python/generate.sh               # after any change to proto/
#
# The protos are mapped to the virtual path steward/v1/, so the stubs import each other as
# `from steward.v1 import ...` and the package imports them the same way. An argument writes
# the stubs under that folder instead (tests/test_stubs_fresh.py compares such a run with the
# committed files). PYTHON picks the interpreter (default: python3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
mkdir -p "$out/steward/v1"
"${PYTHON:-python3}" -m grpc_tools.protoc \
    -I "steward/v1=$here/../../proto" \
    --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
    steward/v1/steward.proto steward/v1/errors.proto
