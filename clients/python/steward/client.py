"""The client: endpoints, the retry rules, and the resource store.

One :class:`Client` talks to several nodes. Any node serves any request (followers forward
writes to the leader), so a call goes to the preferred endpoint and moves on when that node is
unavailable: to the leader it names (``x-steward-leader`` or ErrorInfo metadata ``leader``), else
to the next endpoint. Within the call's deadline:

* reads are repeated anywhere: repeating a read cannot change anything, and an attempt gets only
  part of the deadline, so a node that takes the connection but never answers (paused, wedged)
  leaves the rest to the others;
* writes are repeated only when no node can have acted on them: the reason says ``NOT_APPLIED``,
  ``AUTH_CHANGED`` or ``OVERLOADED`` (after its RetryInfo), or the connection was never made.
  An ``OUTCOME_UNKNOWN`` write is raised as :class:`~steward.errors.OutcomeUnknown` (read back
  before writing it again), unless the request carries its own idempotency key (pool acquire
  ``request_id``, operation ``idempotency_key``).

Objects are dicts (the JSON text steward stores); other replies are the generated messages of
``steward.v1.steward_pb2``. :meth:`Client.call` reaches any RPC the helpers do not wrap.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import grpc

from steward import errors
from steward.locks import Lock
from steward.v1 import steward_pb2 as pb
from steward.v1 import steward_pb2_grpc as pb_grpc
from steward.watch import Watch
from steward.workers import Handler, Worker

#: The deadline of a call when the caller gives none, in seconds.
DEFAULT_TIMEOUT_S = 10.0
#: With several endpoints, a read attempt gets this share of what is left of its deadline.
READ_ATTEMPT_SHARE = 1 / 3
#: The shortest read attempt, in seconds (a share of a short deadline would time out healthy
#: nodes).
READ_ATTEMPT_MIN_S = 0.5
#: Pauses between attempts at nodes that named no leader: from the first, doubling to the last.
BACKOFF_FIRST_S = 0.025
BACKOFF_MAX_S = 0.5
#: How many times :meth:`Client.list` starts a list again after its continue token expired.
LIST_RESTARTS_MAX = 3
#: How soon grpc-core tries a refused endpoint again (its default starts at 1 s and grows to
#: 120 s, far too slow for a node that restarts in a second).
RECONNECT_BACKOFF_MAX_MS = 1000

_STUBS = {
    "Resources": pb_grpc.ResourcesStub,
    "Locks": pb_grpc.LocksStub,
    "Operations": pb_grpc.OperationsStub,
    "Workers": pb_grpc.WorkersStub,
    "Cluster": pb_grpc.ClusterStub,
    "LeaseService": pb_grpc.LeaseServiceStub,
    "StatusService": pb_grpc.StatusServiceStub,
    "Auth": pb_grpc.AuthStub,
    "Reservations": pb_grpc.ReservationsStub,
}

#: A fence: a held lock (anything with ``name`` and ``token``) or ``(lock_name, token)``.
FenceLike = tuple[str, int] | Any


class Client:
    """A connection to a steward cluster through any of its nodes.

    Args:
        endpoints: client addresses, ``"host:port"``.
        timeout: the default deadline of a call in seconds (each helper takes ``timeout=`` too).
        token: a bearer token (``"<user>.<secret>"``) when authentication is on.
        root_certificates, certificate_chain, private_key: PEM bytes for TLS / mutual TLS.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        timeout: float = DEFAULT_TIMEOUT_S,
        *,
        token: str | None = None,
        root_certificates: bytes | None = None,
        certificate_chain: bytes | None = None,
        private_key: bytes | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("endpoints: at least one host:port is required")
        self.timeout = timeout
        self._endpoints = [e.strip() for e in endpoints]
        self._preferred = 0
        self._mutex = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[tuple[str, str], Any] = {}
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._credentials = (
            grpc.ssl_channel_credentials(root_certificates, private_key, certificate_chain)
            if root_certificates is not None
            else None
        )

    # ---- connections and retries ----

    def close(self) -> None:
        """Closes every channel."""
        with self._mutex:
            channels, self._channels, self._stubs = list(self._channels.values()), {}, {}
        for channel in channels:
            channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def endpoints(self) -> list[str]:
        """The endpoints, the one tried first at the head."""
        with self._mutex:
            return self._endpoints[self._preferred :] + self._endpoints[: self._preferred]

    def stub(self, service: str, endpoint: str | None = None) -> Any:
        """The generated stub of ``service`` (``"Resources"``, ``"Locks"``...) on ``endpoint``
        (default: the preferred one)."""
        endpoint = endpoint or self.endpoints[0]
        with self._mutex:
            stub = self._stubs.get((service, endpoint))
            if stub is None:
                stub = _STUBS[service](self._channel(endpoint))
                self._stubs[(service, endpoint)] = stub
            return stub

    def _channel(self, endpoint: str) -> grpc.Channel:
        """The channel to ``endpoint``, made on first use; the caller holds ``_mutex``."""
        channel = self._channels.get(endpoint)
        if channel is None:
            options = [
                ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
            ]
            channel = (
                grpc.secure_channel(endpoint, self._credentials, options)
                if self._credentials is not None
                else grpc.insecure_channel(endpoint, options)
            )
            self._channels[endpoint] = channel
        return channel

    def _move_on(self, failed: str, leader: str | None) -> bool:
        """Prefers the named leader, else the endpoint after ``failed``; True when a leader
        other than ``failed`` was named (no pause needed before trying it)."""
        with self._mutex:
            if leader and leader != failed:
                if leader not in self._endpoints:
                    self._endpoints.append(leader)
                self._preferred = self._endpoints.index(leader)
                return True
            if failed in self._endpoints and self._endpoints[self._preferred] == failed:
                self._preferred = (self._preferred + 1) % len(self._endpoints)
            return False

    def call(
        self,
        service: str,
        method: str,
        request: Any,
        *,
        write: bool,
        idempotent: bool = False,
        timeout: float | None = None,
    ) -> Any:
        """Calls a unary RPC under the retry rules and returns its reply.

        ``write`` says whether the call may change state; ``idempotent`` that resending it
        after an unknown outcome cannot act twice (it carries its own idempotency key).
        Raises a :class:`~steward.errors.StewardError` subclass.
        """
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        pause = BACKOFF_FIRST_S
        last_err: errors.StewardError | None = None
        # Moving to a named leader goes at once, but not twice in a row: two nodes that name
        # each other (leadership moving) are then paused between, as any other retry.
        jumped = False
        while True:
            endpoint = self.endpoints[0]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if last_err is not None and last_err.not_applied:
                    raise last_err  # the caller may still send it again: nothing acted on it
                raise errors.DeadlineExceeded(
                    f"{service}.{method}: no node answered within the deadline",
                    code=grpc.StatusCode.DEADLINE_EXCEEDED,
                )
            budget = remaining
            if not write and len(self._endpoints) > 1:
                budget = min(remaining, max(remaining * READ_ATTEMPT_SHARE, READ_ATTEMPT_MIN_S))
            rpc = getattr(self.stub(service, endpoint), method)
            try:
                return rpc(request, timeout=budget, metadata=self._metadata)
            except grpc.RpcError as rpc_error:
                err = errors.from_rpc_error(rpc_error)
            attempt_timed_out = (
                err.code == grpc.StatusCode.DEADLINE_EXCEEDED
                and not err.reason
                and deadline - time.monotonic() > 0
            )
            if not _may_retry(err, write, idempotent, attempt_timed_out):
                raise err
            last_err = err
            if self._move_on(endpoint, err.leader) and not jumped:
                jumped = True
                continue
            jumped = False
            delay = err.retry_delay if err.retry_delay is not None else pause
            time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
            pause = min(pause * 2, BACKOFF_MAX_S)

    # ---- resources ----

    def create(self, obj: dict, *, fence: FenceLike | None = None, timeout: float | None = None) -> dict:
        """Creates an object; returns it as stored (metadata.resourceVersion set).
        Raises AlreadyExists."""
        req = pb.CreateRequest(object_json=json.dumps(obj), fence=_fence(fence))
        return _obj(self.call("Resources", "Create", req, write=True, timeout=timeout))

    def get(
        self,
        kind: str,
        name: str,
        namespace: str = "",
        *,
        serializable: bool = False,
        timeout: float | None = None,
    ) -> dict:
        """One object (namespace ``""``: ``"default"``). Raises NotFound."""
        req = pb.GetRequest(kind=kind, namespace=namespace, name=name, consistency=_consistency(serializable))
        return _obj(self.call("Resources", "Get", req, write=False, timeout=timeout))

    def list(
        self,
        kind: str,
        namespace: str = "",
        selector: str = "",
        *,
        serializable: bool = False,
        page_size: int = 0,
        continue_token: str = "",
        timeout: float | None = None,
    ) -> tuple[list[dict], int]:
        """Every object of ``kind`` (namespace ``""``: all namespaces) matching the label
        ``selector``, in pages of ``page_size`` (0: the node's ``limits.list_page_default``),
        following continue tokens from ``continue_token`` (``""``: the first page). Returns
        ``(objects, revision)``: the node reads every page as of the first page's revision, the
        one returned, so this is the list as of that revision (watch from revision + 1 to see
        what changes next). ``timeout`` bounds each page.

        A continue token expires when the node's history no longer reaches back to its revision
        (many writes meanwhile, or the node restarted: :func:`~steward.errors.continue_expired`).
        Then the whole list starts again from its first page, at most
        :data:`LIST_RESTARTS_MAX` times, after which the expiry is raised
        (:class:`~steward.errors.RevisionCompacted`). A list from the caller's own
        ``continue_token`` is not started again (the pages before it are the caller's): its
        expiry is raised at once.
        """

        def page(token: str) -> pb.ListReply:
            req = pb.ListRequest(
                kind=kind,
                namespace=namespace,
                label_selector=selector,
                limit=page_size,
                continue_token=token,
                consistency=_consistency(serializable),
            )
            return self.call("Resources", "List", req, write=False, timeout=timeout)

        restarts = 0
        while True:
            first = page(continue_token)
            items = [json.loads(o) for o in first.objects_json]
            token = first.continue_token
            try:
                while token:
                    reply = page(token)
                    items.extend(json.loads(o) for o in reply.objects_json)
                    token = reply.continue_token
            except errors.StewardError as err:
                if continue_token or restarts >= LIST_RESTARTS_MAX or not errors.continue_expired(err):
                    raise
                restarts += 1
                continue
            return items, int(first.revision)

    def revision(self, kind: str, *, timeout: float | None = None) -> int:
        """The store revision now (a linearizable one-object list of ``kind``)."""
        req = pb.ListRequest(kind=kind, limit=1)
        return int(self.call("Resources", "List", req, write=False, timeout=timeout).revision)

    def update(
        self,
        obj: dict,
        *,
        expected_revision: int = 0,
        fence: FenceLike | None = None,
        timeout: float | None = None,
    ) -> dict:
        """Replaces apiVersion, spec, labels and annotations (status is kept). With
        ``expected_revision`` (or the object's own metadata.resourceVersion) as a precondition:
        Conflict when stale, its ``current_revision`` the object's revision."""
        req = pb.UpdateRequest(
            object_json=json.dumps(obj), expected_revision=expected_revision, fence=_fence(fence)
        )
        return _obj(self.call("Resources", "Update", req, write=True, timeout=timeout))

    def update_status(
        self,
        obj: dict,
        *,
        expected_revision: int = 0,
        fence: FenceLike | None = None,
        timeout: float | None = None,
    ) -> dict:
        """Replaces status only."""
        req = pb.UpdateRequest(
            object_json=json.dumps(obj), expected_revision=expected_revision, fence=_fence(fence)
        )
        return _obj(self.call("Resources", "UpdateStatus", req, write=True, timeout=timeout))

    def delete(
        self,
        kind: str,
        name: str,
        namespace: str = "",
        *,
        expected_revision: int = 0,
        fence: FenceLike | None = None,
        timeout: float | None = None,
    ) -> dict:
        """Deletes an object; returns it as it was. Raises NotFound, Conflict."""
        req = pb.DeleteRequest(
            kind=kind,
            namespace=namespace,
            name=name,
            expected_revision=expected_revision,
            fence=_fence(fence),
        )
        return _obj(self.call("Resources", "Delete", req, write=True, timeout=timeout))

    def watch(
        self,
        kind: str,
        namespace: str = "",
        selector: str = "",
        *,
        start_revision: int = 0,
        bookmarks: bool = False,
    ) -> Watch:
        """Events of ``kind`` from ``start_revision`` (inclusive; 0: from now on), resumed on
        another node after a broken stream with no gap and no repeat."""
        return Watch(self, kind, namespace, selector, start_revision, bookmarks)

    # ---- locks ----

    def lock(self, name: str, **kwargs: Any) -> Lock:
        """A :class:`~steward.locks.Lock` on ``name`` (not acquired yet; use ``with``); keyword
        arguments as Lock's (holder, ttl, mode, wait, details, refresh)."""
        return Lock(self, name, **kwargs)

    # ---- operations and workers ----

    def submit_operation(
        self,
        kind: str,
        name: str,
        verb: str,
        namespace: str = "",
        *,
        params: dict | None = None,
        idempotency_key: str = "",
        create_object: dict | None = None,
        timeout: float | None = None,
    ) -> pb.SubmitOperationReply:
        """Queues ``verb`` on the target. With an ``idempotency_key`` an unknown outcome is
        resent (the key answers the first operation)."""
        req = pb.SubmitOperationRequest(
            kind=kind,
            namespace=namespace,
            name=name,
            verb=verb,
            params_json=json.dumps(params) if params is not None else "",
            idempotency_key=idempotency_key,
            create_object_json=json.dumps(create_object) if create_object is not None else "",
        )
        return self.call(
            "Operations", "Submit", req, write=True, idempotent=bool(idempotency_key), timeout=timeout
        )

    def get_operation(self, op_id: str, *, timeout: float | None = None) -> pb.OperationInfo:
        """One operation. Raises NotFound."""
        req = pb.GetOperationRequest(id=op_id)
        return self.call("Operations", "Get", req, write=False, timeout=timeout)

    def wait_operation(
        self, op_id: str, states: Iterable[str] = ("SUCCEEDED", "FAILED", "ABORTED"), *, timeout: float = 30.0
    ) -> pb.OperationInfo:
        """Waits until the operation is in one of ``states`` (names without the
        OPERATION_STATE_ prefix), watching its changes; raises DeadlineExceeded."""
        wanted = {pb.OperationState.Value(f"OPERATION_STATE_{s}") for s in states}
        deadline = time.monotonic() + timeout
        op = self.get_operation(op_id)
        while op.state not in wanted:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise errors.DeadlineExceeded(
                    f"operation {op_id} still {pb.OperationState.Name(op.state)}",
                    code=grpc.StatusCode.DEADLINE_EXCEEDED,
                )
            # A live watch of the target, then a read: a change between the two shows in
            # either. The watch's short deadline bounds a change the watch missed while it was
            # being set up; the next round reads again.
            req = pb.WatchOperationsRequest(kind=op.kind, namespace=op.namespace, name=op.name)
            stream = self.stub("Operations").Watch(req, timeout=min(remaining, 1.0), metadata=self._metadata)
            try:
                op = self.get_operation(op_id)
                for event in stream:
                    if event.id == op_id:
                        op = event
                        if op.state in wanted:
                            break
            except grpc.RpcError:
                pass  # the round's deadline, or a broken stream: read again
            finally:
                stream.cancel()
            if op.state not in wanted:
                op = self.get_operation(op_id)
        return op

    def worker(self, worker_id: str, handles: Sequence[str], handler: Handler, **kwargs: Any) -> Worker:
        """A :class:`~steward.workers.Worker` running ``handler`` for the ``Kind:verb`` pairs in
        ``handles`` (not started yet; use ``with`` or ``start()``); keyword arguments as
        Worker's (capacity, ttl, deregister_on_stop)."""
        return Worker(self, worker_id, handles, handler, **kwargs)

    # ---- pools ----

    def pool_sync(
        self, resources: Iterable[tuple[str, str, str]], *, timeout: float | None = None
    ) -> pb.PoolResourcesReply:
        """Makes the pool hold exactly these ``(name, type, initial_state)`` resources."""
        req = pb.PoolSyncRequest(
            resources=[pb.PoolSyncEntry(name=n, type=t, state=s) for n, t, s in resources]
        )
        return self.call("LeaseService", "Sync", req, write=True, timeout=timeout)

    def pool_acquire(
        self,
        type: str,
        state: str,
        dest: str,
        owner: str,
        *,
        request_id: str = "",
        wait: float = 0.0,
        timeout: float | None = None,
    ) -> pb.PoolResource:
        """Leases the oldest-updated free resource of ``type`` in ``state`` and moves it to
        ``dest``; waits up to ``wait`` seconds for one (NotFound when none). With a
        ``request_id`` an unknown outcome is resent (the id answers the lease it took)."""
        req = pb.PoolAcquireRequest(
            type=type, state=state, dest=dest, owner=owner, request_id=request_id, wait_ms=int(wait * 1000)
        )
        call_timeout = (self.timeout if timeout is None else timeout) + wait
        reply = self.call(
            "LeaseService", "Acquire", req, write=True, idempotent=bool(request_id), timeout=call_timeout
        )
        return reply.resource

    def pool_release(
        self, name: str, owner: str, dest: str, *, timeout: float | None = None
    ) -> pb.PoolResource:
        """Gives a leased resource back, moved to ``dest``."""
        req = pb.PoolReleaseRequest(name=name, owner=owner, dest=dest)
        return self.call("LeaseService", "Release", req, write=True, timeout=timeout).resource

    # ---- cluster ----

    def cluster_status(self, *, timeout: float | None = None) -> pb.ClusterStatusReply:
        """Every node's state as the node asked sees it."""
        return self.call("Cluster", "Status", pb.ClusterStatusRequest(), write=False, timeout=timeout)


def _may_retry(err: errors.StewardError, write: bool, idempotent: bool, attempt_timed_out: bool) -> bool:
    if err.not_applied:
        return True
    if write:
        # Unknown outcome: resending cannot act twice only when the request is idempotent.
        return idempotent and isinstance(err, (errors.OutcomeUnknown, errors.Unavailable))
    # Reads: a node that could not serve, or that never answered within the attempt's share.
    return err.code == grpc.StatusCode.UNAVAILABLE or attempt_timed_out


def _consistency(serializable: bool) -> int:
    return pb.CONSISTENCY_SERIALIZABLE if serializable else pb.CONSISTENCY_UNSPECIFIED


def _fence(fence: FenceLike | None) -> pb.Fence | None:
    if fence is None:
        return None
    if isinstance(fence, tuple):
        name, token = fence
        return pb.Fence(lock=name, token=token)
    return pb.Fence(lock=fence.name, token=fence.token)


def _obj(reply: Any) -> dict:
    obj: dict = json.loads(reply.object_json)
    return obj
