"""Typed errors decoded from steward's refusals.

Every refusal a steward node sends carries ``grpc-status-details-bin``: a ``google.rpc.Status``
with one ``google.rpc.ErrorInfo`` (domain ``steward``, a stable ``reason`` such as
``"LOCK_BUSY"``, and metadata such as ``current_revision``, ``limit`` or ``leader``) and, when a
retry may succeed after a delay, a ``google.rpc.RetryInfo`` (proto/errors.proto documents
every reason). :func:`from_rpc_error` turns a ``grpc.RpcError`` into the :class:`StewardError`
subclass of its reason; a reason this client has no class for is classed by its gRPC code, and
still carries it.
"""

from __future__ import annotations

import grpc
from google.protobuf.message import DecodeError
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

#: ErrorInfo.domain of steward's refusals.
DOMAIN = "steward"
#: Trailer naming the leader's client address when a node could not serve a request.
LEADER_TRAILER = "x-steward-leader"
#: Trailer of servers older than ErrorInfo reasons (still sent): the write was refused before any
#: leader appended it (NOT_APPLIED, OVERLOADED on a write, AUTH_CHANGED).
NOT_APPLIED_TRAILER = "x-steward-not-applied"
#: The trailer of the google.rpc.Status details.
_DETAILS_TRAILER = "grpc-status-details-bin"
#: Reasons of refusals that no leader acted on, which say to send the request again (after
#: RetryInfo): safe for writes too.
NOT_APPLIED_REASONS = frozenset({"NOT_APPLIED", "AUTH_CHANGED", "OVERLOADED"})
#: What grpc-core says when no connection to the endpoint could be made: the call failed when
#: picking a connection, before any byte of it was sent.
_NEVER_CONNECTED = "failed to connect to all addresses"


class StewardError(Exception):
    """A refused or failed call.

    Attributes:
        reason: ErrorInfo.reason (``"NOT_FOUND"``, ``"LOCK_BUSY"``...), ``""`` if none was sent
            (a transport failure, or a server too old to send reasons).
        code: the gRPC status code.
        message: the status message (for people; match on ``reason``, never on this).
        metadata: ErrorInfo.metadata (e.g. ``current_revision``, ``limit``, ``field``).
        retry_delay: RetryInfo.retry_delay in seconds, or None.
        leader: the leader's client address when the node named it, else None.
        never_sent: the call failed before a connection existed, so no node saw it.
    """

    #: The ErrorInfo reason a subclass stands for.
    REASON = ""

    def __init__(
        self,
        message: str,
        *,
        reason: str = "",
        code: grpc.StatusCode = grpc.StatusCode.UNKNOWN,
        metadata: dict[str, str] | None = None,
        retry_delay: float | None = None,
        leader: str | None = None,
        never_sent: bool = False,
        legacy_not_applied: bool = False,
    ) -> None:
        super().__init__(f"{reason or code.name}: {message}")
        self.message = message
        self.reason = reason
        self.code = code
        self.metadata = dict(metadata or {})
        self.retry_delay = retry_delay
        self.leader = leader
        self.never_sent = never_sent
        self._legacy_not_applied = legacy_not_applied

    @property
    def not_applied(self) -> bool:
        """True when no leader acted on the request: it may be sent again, even a write."""
        return self.never_sent or self.reason in NOT_APPLIED_REASONS or self._legacy_not_applied


class NotApplied(StewardError):
    """Refused before any leader acted on it (no leader, leader unreachable): send it again."""

    REASON = "NOT_APPLIED"


class OutcomeUnknown(StewardError):
    """A write may or may not take effect: read back, or resend only if it is idempotent."""

    REASON = "OUTCOME_UNKNOWN"


class Unavailable(StewardError):
    """The node cannot serve now (reason UNAVAILABLE), or none could be reached (no reason): a
    read may go to another node; a write's outcome is unknown, as OutcomeUnknown."""

    REASON = "UNAVAILABLE"


class NotFound(StewardError):
    """What the request names is absent (metadata ``resource_type``, ``name``)."""

    REASON = "NOT_FOUND"


class PoolEmpty(NotFound):
    """No free pool resource of the type is in the state asked for."""

    REASON = "POOL_EMPTY"


class PoolWaitExpired(StewardError):
    """A pool acquire was not granted within its wait; nothing is leased."""

    REASON = "POOL_WAIT_EXPIRED"


class AlreadyExists(StewardError):
    """The object already exists."""

    REASON = "ALREADY_EXISTS"


class Conflict(StewardError):
    """expected_revision or metadata.resourceVersion is stale: re-read, re-apply, resend."""

    REASON = "REVISION_CONFLICT"

    @property
    def current_revision(self) -> int | None:
        """The object's revision when the write was refused (ErrorInfo metadata)."""
        value = self.metadata.get("current_revision")
        return int(value) if value is not None and value.isdigit() else None


class InvalidArgument(StewardError):
    """A field broke a rule (metadata ``field`` and ``rule``)."""

    REASON = "INVALID_ARGUMENT"


class RevisionCompacted(StewardError):
    """A watch's start revision, or the revision a list's continue token pins, is no longer
    kept: list again from the first page, watch from its revision + 1 (metadata
    ``current_revision``, ``oldest_revision``; for a list also ``inconsistent_continue_token``).
    :func:`continue_expired` tells a list's expiry apart from other refusals."""

    REASON = "REVISION_COMPACTED"

    @property
    def inconsistent_continue_token(self) -> str | None:
        """For an expired list, a token that goes on after the same key as of
        ``current_revision``: for a caller that accepts pages read at different revisions
        (Kubernetes' "inconsistent continue"). None for a watch."""
        return self.metadata.get("inconsistent_continue_token") or None


class Overloaded(StewardError):
    """Too much in flight on the node; not applied: send again after ``retry_delay``."""

    REASON = "OVERLOADED"


class LimitExceeded(StewardError):
    """A named limit was exceeded (metadata ``limit`` and ``value``)."""

    REASON = "LIMIT_EXCEEDED"


class LockBusy(StewardError):
    """The lock is held and the request did not wait."""

    REASON = "LOCK_BUSY"


class LockDelayed(StewardError):
    """The lock is in its lock-delay after an expiry; ``retry_delay`` says how long is left."""

    REASON = "LOCK_DELAYED"


class LockWaitExpired(StewardError):
    """The lock was not granted within the request's wait_ms."""

    REASON = "LOCK_WAIT_EXPIRED"


class LockNotHeld(StewardError):
    """The holder and token are not a live holder of the lock: acquire it again."""

    REASON = "LOCK_NOT_HELD"


class FenceRejected(StewardError):
    """The write's fencing token is not a live WRITE holder of its lock: stop, re-acquire."""

    REASON = "FENCE_REJECTED"


class StaleAssignment(StewardError):
    """The worker's (attempt, epoch) lost its assignment: stop the work, do not retry."""

    REASON = "STALE_ASSIGNMENT"


class AuthChanged(StewardError):
    """Users or roles changed after the request was authorized; it was not applied."""

    REASON = "AUTH_CHANGED"


class Unauthenticated(StewardError):
    """No valid credentials."""

    REASON = "UNAUTHENTICATED"


class PermissionDenied(StewardError):
    """The caller's roles do not allow the request."""

    REASON = "PERMISSION_DENIED"


class Internal(StewardError):
    """steward's own failure; a write's outcome is unknown."""

    REASON = "INTERNAL"


class DeadlineExceeded(StewardError):
    """The caller's deadline passed before any node answered (a write's outcome is unknown)."""


_BY_REASON: dict[str, type[StewardError]] = {
    cls.REASON: cls
    for cls in (
        NotApplied,
        OutcomeUnknown,
        Unavailable,
        NotFound,
        PoolEmpty,
        PoolWaitExpired,
        RevisionCompacted,
        Overloaded,
        Internal,
        AlreadyExists,
        Conflict,
        InvalidArgument,
        LimitExceeded,
        LockBusy,
        LockDelayed,
        LockWaitExpired,
        LockNotHeld,
        FenceRejected,
        StaleAssignment,
        AuthChanged,
        Unauthenticated,
        PermissionDenied,
    )
}

# Without a reason this client knows (a transport failure, an older server, a newer reason), only
# codes that mean one thing pick a class; Aborted and FailedPrecondition cover several reasons and
# stay StewardError.
_BY_CODE: dict[grpc.StatusCode, type[StewardError]] = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExists,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
}


def continue_expired(err: BaseException) -> bool:
    """Whether ``err`` says a list's continue token expired: the revision of the list's first
    page is older than the history the node keeps (OutOfRange, ``REVISION_COMPACTED``; node
    config ``limits.watch_history``, ``watch_history_bytes``). Start the list again from its
    first page, or, accepting pages read at different revisions, go on with
    :attr:`RevisionCompacted.inconsistent_continue_token`."""
    return (
        isinstance(err, StewardError)
        and err.code == grpc.StatusCode.OUT_OF_RANGE
        and err.reason == RevisionCompacted.REASON
    )


def known_reasons() -> frozenset[str]:
    """The reasons that have a class of their own."""
    return frozenset(_BY_REASON)


def from_rpc_error(err: grpc.RpcError) -> StewardError:
    """The typed error of a failed call (``err`` is a ``grpc.RpcError`` that is a ``grpc.Call``)."""
    code = _call_attr(err, "code", grpc.StatusCode.UNKNOWN)
    message = _call_attr(err, "details", "") or ""
    trailers = {k: v for k, v in (_call_attr(err, "trailing_metadata", None) or ()) if isinstance(v, str)}
    reason, metadata, retry_delay = "", {}, None
    try:
        status = rpc_status.from_call(err)  # type: ignore[arg-type]
    except ValueError:
        # The details' code or message differ from the call's (a proxy rewrote the message):
        # the reason is still the server's.
        status = _details(_call_attr(err, "trailing_metadata", None) or ())
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                if info.domain == DOMAIN or not reason:
                    reason, metadata = info.reason, dict(info.metadata)
            elif detail.Is(error_details_pb2.RetryInfo.DESCRIPTOR):
                retry = error_details_pb2.RetryInfo()
                detail.Unpack(retry)
                retry_delay = retry.retry_delay.seconds + retry.retry_delay.nanos / 1e9
    leader = metadata.get("leader") or trailers.get(LEADER_TRAILER) or None
    never_sent = (
        code == grpc.StatusCode.UNAVAILABLE
        and not trailers
        and status is None
        and _NEVER_CONNECTED in message
    )
    cls = _BY_REASON.get(reason) or _BY_CODE.get(code) or StewardError
    if never_sent:
        cls = NotApplied
    return cls(
        message,
        reason=reason,
        code=code,
        metadata=metadata,
        retry_delay=retry_delay,
        leader=leader,
        never_sent=never_sent,
        legacy_not_applied=NOT_APPLIED_TRAILER in trailers
        and code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.ABORTED),
    )


def _details(trailers: tuple) -> status_pb2.Status | None:
    for key, value in trailers:
        if key == _DETAILS_TRAILER and isinstance(value, bytes):
            try:
                return status_pb2.Status.FromString(value)
            except DecodeError:
                return None
    return None


def _call_attr(err: grpc.RpcError, name: str, default):  # noqa: ANN001, ANN202
    method = getattr(err, name, None)
    if method is None:
        return default
    try:
        return method()
    except Exception:  # a call object that cannot say: treat as absent
        return default
