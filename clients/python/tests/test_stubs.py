"""The committed stubs match proto/, and the typed errors match proto/errors.proto. No cluster."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

from steward import errors
from steward.v1 import errors_pb2

HERE = Path(__file__).resolve().parents[1]
GENERATED = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def test_committed_stubs_match_the_protos(tmp_path: Path) -> None:
    subprocess.run(
        [str(HERE / "generate.sh"), str(tmp_path)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
    )
    fresh_dir, committed_dir = tmp_path / "steward" / "v1", HERE / "steward" / "v1"
    fresh = sorted(p.name for p in fresh_dir.iterdir() if p.name.endswith(GENERATED))
    committed = sorted(p.name for p in committed_dir.iterdir() if p.name.endswith(GENERATED))
    assert fresh == committed, "generated files differ: run clients/python/generate.sh"
    stale = [n for n in fresh if not filecmp.cmp(fresh_dir / n, committed_dir / n, shallow=False)]
    assert not stale, f"{stale} differ from proto/: run clients/python/generate.sh and commit them"


def test_every_typed_error_names_a_reason_of_errors_proto() -> None:
    proto_reasons = {
        name.removeprefix("ERROR_REASON_")
        for name in errors_pb2.ErrorReason.keys()
        if name != "ERROR_REASON_UNSPECIFIED"
    }
    assert errors.known_reasons() <= proto_reasons, errors.known_reasons() - proto_reasons
    assert errors.NOT_APPLIED_REASONS <= proto_reasons
