"""List pagination: every page read as of the first page's revision, and a list whose continue
token expired (the node's watch history no longer reaches back to it) started again from its
first page, at most LIST_RESTARTS_MAX times. On a fake Resources stub, then against a real node
that keeps only SMALL_HISTORY events of history (conftest's `small_history_node`)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from conftest import SMALL_HISTORY, Cluster
from test_rules import FakeCall, refusal

import steward
from steward import Client, continue_expired
from steward.client import LIST_RESTARTS_MAX
from steward.v1 import steward_pb2 as pb

# ---- on a fake stub ----

Answer = Callable[[int, str], "pb.ListReply | FakeCall"]


class FakeResources:
    """A Resources stub whose List gives ``answer(call, continue_token)``: a reply, or a
    FakeCall raised; it records the tokens it was asked for."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def List(self, request: pb.ListRequest, **_: object) -> pb.ListReply:  # noqa: N802
        reply = self.answer(len(self.asked), request.continue_token)
        self.asked.append(request.continue_token)
        if isinstance(reply, FakeCall):
            raise reply
        return reply


def fake_client(monkeypatch: pytest.MonkeyPatch, answer: Answer) -> tuple[Client, FakeResources]:
    fake = FakeResources(answer)
    c = Client(["127.0.0.1:1"], timeout=1.0)  # never dialled: every call goes to the fake
    monkeypatch.setattr(c, "stub", lambda service, endpoint=None: fake)
    return c, fake


def expired() -> FakeCall:
    """An expiry as the server sends it (src/server/errors.rs `continue_expired`)."""
    return refusal(
        grpc.StatusCode.OUT_OF_RANGE,
        "REVISION_COMPACTED",
        current_revision="9",
        oldest_revision="7",
        inconsistent_continue_token="t",
    )


def page(names: list[str], token: str) -> pb.ListReply:
    return pb.ListReply(objects_json=[f'{{"name": "{n}"}}' for n in names], revision=5, continue_token=token)


def expires_once(call: int, token: str) -> pb.ListReply | FakeCall:
    """Pages "" -> [a] "1" -> [b] "2" -> [c]; the second call (the first "1") expires."""
    if call == 1:
        return expired()
    return {"": page(["a"], "1"), "1": page(["b"], "2"), "2": page(["c"], "")}[token]


def test_an_expired_token_starts_the_list_again(monkeypatch: pytest.MonkeyPatch) -> None:
    c, fake = fake_client(monkeypatch, expires_once)
    items, revision = c.list("Director", page_size=1)
    assert (items, revision) == ([{"name": "a"}, {"name": "b"}, {"name": "c"}], 5)
    assert fake.asked == ["", "1", "", "1", "2"]


def test_restarts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    c, fake = fake_client(monkeypatch, lambda _, token: page(["a"], "1") if token == "" else expired())
    with pytest.raises(steward.RevisionCompacted) as caught:
        c.list("Director", page_size=1)
    assert continue_expired(caught.value)
    assert caught.value.inconsistent_continue_token == "t"
    assert fake.asked == ["", "1"] * (LIST_RESTARTS_MAX + 1)


def test_a_list_from_the_callers_token_is_not_started_again(monkeypatch: pytest.MonkeyPatch) -> None:
    c, fake = fake_client(monkeypatch, lambda _, token: page(["b"], "2") if token == "1" else expired())
    with pytest.raises(steward.RevisionCompacted) as caught:
        c.list("Director", page_size=1, continue_token="1")
    assert continue_expired(caught.value)
    assert fake.asked == ["1", "2"]
    # Its first page too.
    c, fake = fake_client(monkeypatch, lambda _, token: expired())
    with pytest.raises(steward.RevisionCompacted):
        c.list("Director", continue_token="1")
    assert fake.asked == ["1"]


def test_other_errors_are_raised_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    no_details = FakeCall(grpc.StatusCode.OUT_OF_RANGE, "no details: not an expiry")
    c, fake = fake_client(monkeypatch, lambda _, token: page(["a"], "1") if token == "" else no_details)
    with pytest.raises(steward.StewardError) as caught:
        c.list("Director", page_size=1)
    assert not continue_expired(caught.value)
    assert fake.asked == ["", "1"]


def test_what_continue_expired_recognises() -> None:
    assert continue_expired(steward.errors.from_rpc_error(expired()))
    # The same reason under another code is not the List refusal.
    other = refusal(grpc.StatusCode.FAILED_PRECONDITION, "REVISION_COMPACTED")
    assert not continue_expired(steward.errors.from_rpc_error(other))
    assert not continue_expired(ValueError("not a steward error"))
    # A watch's compaction carries no token to go on with.
    watch = refusal(grpc.StatusCode.OUT_OF_RANGE, "REVISION_COMPACTED", current_revision="9")
    assert steward.errors.from_rpc_error(watch).inconsistent_continue_token is None


# ---- against a node that keeps SMALL_HISTORY events ----


def obj(name: str, suite: str) -> dict:
    return {"apiVersion": "v1", "kind": "Director", "metadata": {"name": name, "labels": {"suite": suite}}}


def names(items: list[dict]) -> list[str]:
    return [o["metadata"]["name"] for o in items]


def outrun_history(writer: Client, suite: str) -> None:
    """More writes than the node's history keeps (of objects outside ``suite``'s lists)."""
    for i in range(SMALL_HISTORY + 2):
        writer.create(obj(f"{suite}-other-{i:02}", f"{suite}-other"))


def test_a_token_older_than_the_kept_history_has_expired(small_history_node: Cluster, unique: str) -> None:
    c = small_history_node.client()
    for i in range(6):
        c.create(obj(f"{unique}-d{i:02}", unique))
    selector = f"suite={unique}"
    request = pb.ListRequest(kind="Director", label_selector=selector, limit=2)
    first = c.call("Resources", "List", request, write=False)
    request.continue_token = first.continue_token
    second = c.call("Resources", "List", request, write=False)
    assert second.revision == first.revision

    outrun_history(c, unique)
    request.continue_token = second.continue_token
    with pytest.raises(steward.RevisionCompacted) as caught:
        c.call("Resources", "List", request, write=False)
    err = caught.value
    assert continue_expired(err), err
    assert err.code == grpc.StatusCode.OUT_OF_RANGE
    assert err.message.startswith(
        f"continue_token: the list's revision {first.revision} is older than the kept history"
    ), err.message
    now, now_at = c.list("Director", selector=selector)
    assert names(now) == [f"{unique}-d{i:02}" for i in range(6)]
    assert err.metadata["current_revision"] == str(now_at)
    assert first.revision < int(err.metadata["oldest_revision"]) <= now_at

    # The caller's own token is not started again...
    with pytest.raises(steward.RevisionCompacted):
        c.list("Director", selector=selector, page_size=2, continue_token=second.continue_token)
    # ...but the refusal's inconsistent token goes on after the same key, as of now.
    rest, rest_at = c.list("Director", selector=selector, continue_token=err.inconsistent_continue_token)
    assert rest_at == now_at
    assert names(rest) == [f"{unique}-d{i:02}" for i in range(4, 6)]


def test_a_list_whose_token_expires_starts_again(
    small_history_node: Cluster, unique: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, lister = small_history_node.client(), small_history_node.client()
    for i in range(6):
        writer.create(obj(f"{unique}-d{i:02}", unique))
    selector = f"suite={unique}"
    asked: list[str] = []

    class Outrun:
        """The real stub; after the list's first page, the writes that expire its token."""

        def __init__(self, real: object) -> None:
            self.real = real

        def List(self, request: pb.ListRequest, **kwargs: object) -> pb.ListReply:  # noqa: N802
            asked.append(request.continue_token)
            reply = self.real.List(request, **kwargs)  # type: ignore[attr-defined]
            if len(asked) == 1:
                outrun_history(writer, unique)
            return reply

    real_stub = lister.stub
    monkeypatch.setattr(
        lister,
        "stub",
        lambda service, endpoint=None: (
            Outrun(real_stub(service, endpoint)) if service == "Resources" else real_stub(service, endpoint)
        ),
    )
    items, revision = lister.list("Director", selector=selector, page_size=2)
    assert names(items) == [f"{unique}-d{i:02}" for i in range(6)]
    # The first run's first page and its expired second; then the whole list again, once.
    assert asked[0] == asked[2] == "" and asked[1], asked
    assert asked.count("") == 2, f"started again once: {asked}"
    assert revision == writer.revision("Director")
