"""The resource store through the Python client: CRUD, CAS, typed errors, writes through a
follower, and a write retried past an endpoint that refuses connections.

The assertions on `.reason` need a server that sends ErrorInfo (issue 22); against an older one
they fail, by design: the suite checks the contract, not a fallback."""

from __future__ import annotations

import socket

import grpc
import pytest

import steward
from steward import Client
from steward.v1 import steward_pb2 as pb


def director(name: str, **spec: object) -> dict:
    return {
        "apiVersion": "deployment.servicefabrik.io/v1alpha1",
        "kind": "Director",
        "metadata": {"name": name, "labels": {"suite": "python", "state": "in_queue"}},
        "spec": spec or {"replicas": 1},
    }


def test_crud(client: Client, unique: str) -> None:
    created = client.create(director(unique, replicas=3))
    rev = int(created["metadata"]["resourceVersion"])
    assert rev > 0
    assert created["spec"] == {"replicas": 3}

    got = client.get("Director", unique)
    assert got["metadata"]["resourceVersion"] == str(rev)
    assert got["metadata"]["namespace"] == "default"

    items, list_rev = client.list("Director", selector="suite=python,state=in_queue")
    assert unique in {o["metadata"]["name"] for o in items}
    assert list_rev >= rev

    got["spec"] = {"replicas": 5}
    updated = client.update(got)
    assert updated["spec"] == {"replicas": 5}
    assert int(updated["metadata"]["resourceVersion"]) > rev
    assert updated["metadata"]["generation"] == 2

    updated["status"] = {"state": "succeeded"}
    with_status = client.update_status(updated)
    assert with_status["status"] == {"state": "succeeded"}
    assert with_status["metadata"]["generation"] == 2, "status changes leave generation alone"

    deleted = client.delete("Director", unique)
    assert deleted["metadata"]["name"] == unique
    with pytest.raises(steward.NotFound) as caught:
        client.get("Director", unique)
    assert caught.value.reason == "NOT_FOUND"
    assert caught.value.code == grpc.StatusCode.NOT_FOUND


def test_cas_conflict_carries_the_current_revision(client: Client, unique: str) -> None:
    first = client.create(director(unique))
    rev1 = int(first["metadata"]["resourceVersion"])
    second = client.update(director(unique, replicas=2), expected_revision=rev1)
    rev2 = int(second["metadata"]["resourceVersion"])
    assert rev2 > rev1

    with pytest.raises(steward.Conflict) as caught:
        client.update(director(unique, replicas=9), expected_revision=rev1)
    err = caught.value
    assert err.reason == "REVISION_CONFLICT"
    assert err.code == grpc.StatusCode.ABORTED
    assert err.current_revision == rev2
    # The object's own resourceVersion is a precondition too.
    stale = dict(first, spec={"replicas": 9})
    with pytest.raises(steward.Conflict):
        client.update(stale)
    with pytest.raises(steward.Conflict):
        client.delete("Director", unique, expected_revision=rev1)
    assert client.get("Director", unique)["spec"] == {"replicas": 2}


def test_already_exists_names_the_object(client: Client, unique: str) -> None:
    client.create(director(unique))
    with pytest.raises(steward.AlreadyExists) as exists:
        client.create(director(unique))
    assert exists.value.reason == "ALREADY_EXISTS"
    assert unique in exists.value.metadata.get("name", ""), exists.value.metadata


def test_invalid_argument_names_the_field(client: Client, unique: str) -> None:
    bad = director(unique)
    del bad["metadata"]["name"]
    with pytest.raises(steward.InvalidArgument) as invalid:
        client.create(bad)
    assert invalid.value.reason == "INVALID_ARGUMENT"
    assert invalid.value.metadata.get("field"), invalid.value.metadata


def test_a_lock_without_a_mode_is_refused(client: Client, unique: str) -> None:
    # Not taken as READ (issue 22's first finding): LOCK_MODE_UNSPECIFIED is refused.
    request = pb.AcquireRequest(name=unique, holder="h", ttl_ms=5000)
    with pytest.raises(steward.InvalidArgument) as no_mode:
        client.call("Locks", "Acquire", request, write=True)
    assert "mode" in no_mode.value.metadata.get("field", "") + no_mode.value.message


def test_a_busy_lock_says_lock_busy(client: Client, unique: str) -> None:
    with client.lock(f"{unique}-lock", ttl=10):
        with pytest.raises(steward.LockBusy) as busy:
            client.lock(f"{unique}-lock", ttl=10).acquire()
    assert busy.value.reason == "LOCK_BUSY"
    assert busy.value.code == grpc.StatusCode.ABORTED


def test_write_sent_to_a_follower(cluster, unique: str) -> None:  # noqa: ANN001
    follower = cluster.followers()[0]
    only_follower = cluster.client([follower])
    created = only_follower.create(director(unique))
    assert created["metadata"]["name"] == unique
    # A linearizable read on the follower sees it at once; a serializable one once applied.
    assert (
        only_follower.get("Director", unique)["metadata"]["resourceVersion"]
        == created["metadata"]["resourceVersion"]
    )
    only_follower.update(
        director(unique, replicas=4), expected_revision=int(created["metadata"]["resourceVersion"])
    )
    assert cluster.client([cluster.leader()]).get("Director", unique)["spec"] == {"replicas": 4}


def test_a_write_never_sent_moves_on_to_the_next_endpoint(cluster, unique: str) -> None:  # noqa: ANN001
    with socket.socket() as s:  # a port nobody listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    c = cluster.client([dead, *cluster.endpoints], timeout=10)
    assert c.create(director(unique))["metadata"]["name"] == unique
    assert c.endpoints[0] != dead

    # With no node reachable until the deadline, the error says nothing acted on the write.
    alone = cluster.client([dead], timeout=1.0)
    with pytest.raises(steward.NotApplied) as caught:
        alone.create(director(f"{unique}-never"))
    assert caught.value.never_sent and caught.value.not_applied
    with pytest.raises(steward.NotFound):
        c.get("Director", f"{unique}-never")
