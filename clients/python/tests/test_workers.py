"""An operation run by a Python worker, and a pool lease."""

from __future__ import annotations

import json
import threading

import pytest

import steward
from steward import Client
from steward.v1 import steward_pb2 as pb


def test_an_operation_is_run_by_a_python_worker(client: Client, unique: str) -> None:
    ran: list[tuple[str, int, int]] = []

    def create(op: pb.OperationInfo, aborted: threading.Event) -> dict:
        ran.append((op.id, op.attempt, op.epoch))
        return {"deployment": op.name, "plan": json.loads(op.params_json)["plan"]}

    worker_id = f"{unique}-worker"
    submit = {
        "params": {"plan": "small"},
        "idempotency_key": f"{unique}-create",
        "create_object": {"apiVersion": "v1", "kind": "Director", "metadata": {"name": unique}, "spec": {}},
    }
    with client.worker(worker_id, ["Director:create"], create, ttl=10.0):
        submitted = client.submit_operation("Director", unique, "create", **submit)
        assert submitted.created
        op = client.wait_operation(submitted.operation.id, timeout=30.0)
    assert pb.OperationState.Name(op.state) == "OPERATION_STATE_SUCCEEDED", op
    assert op.worker == worker_id
    assert ran == [(op.id, 1, op.epoch)], "run once, with the assignment's attempt and epoch"
    states = [pb.OperationState.Name(t.state) for t in op.transitions]
    assert "OPERATION_STATE_IN_PROGRESS" in states, states
    target = client.get("Director", unique)
    assert target["status"]["response"] == {"deployment": unique, "plan": "small"}

    again = client.submit_operation("Director", unique, "create", **submit)
    assert not again.created and again.operation.id == op.id


def test_a_pool_resource_is_acquired_and_released(client: Client, unique: str) -> None:
    kind = f"{unique}-type"
    client.pool_sync([(f"{unique}-a", kind, "free"), (f"{unique}-b", kind, "free")])
    first = client.pool_acquire(kind, "free", "busy", owner="py1", request_id=f"{unique}-r1")
    second = client.pool_acquire(kind, "free", "busy", owner="py2")
    assert {first.name, second.name} == {f"{unique}-a", f"{unique}-b"}
    assert (first.owner, first.state) == ("py1", "busy")
    # The same request id answers the lease it took.
    assert (
        client.pool_acquire(kind, "free", "busy", owner="py1", request_id=f"{unique}-r1").name == first.name
    )

    with pytest.raises(steward.PoolEmpty) as empty:
        client.pool_acquire(kind, "free", "busy", owner="py3")
    assert empty.value.reason == "POOL_EMPTY"
    assert isinstance(empty.value, steward.NotFound)

    released = client.pool_release(first.name, owner="py1", dest="free")
    assert (released.owner, released.state) == ("", "free")
    assert client.pool_acquire(kind, "free", "busy", owner="py3").name == first.name
