"""The retry rules and the error decoding, on made-up statuses. No cluster."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

import steward
from steward import errors
from steward.client import _may_retry


class FakeCall(grpc.RpcError):
    """What grpcio raises: an RpcError that is also a Call with code, details and trailers."""

    def __init__(self, code: grpc.StatusCode, details: str, trailers: tuple = ()) -> None:
        self._code, self._details, self._trailers = code, details, trailers

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return self._trailers


def refusal(code: grpc.StatusCode, reason: str, retry_s: float | None = None, **meta: str) -> FakeCall:
    message = f"refused: {reason}"
    status = status_pb2.Status(code=getattr(code_pb2, code.name), message=message)
    info = any_pb2.Any()
    info.Pack(error_details_pb2.ErrorInfo(reason=reason, domain="steward", metadata=meta))
    status.details.append(info)
    if retry_s is not None:
        retry = any_pb2.Any()
        delay = duration_pb2.Duration(seconds=int(retry_s), nanos=int((retry_s % 1) * 1e9))
        retry.Pack(error_details_pb2.RetryInfo(retry_delay=delay))
        status.details.append(retry)
    return FakeCall(code, message, (("grpc-status-details-bin", status.SerializeToString()),))


def test_reasons_decode_into_typed_errors() -> None:
    err = errors.from_rpc_error(
        refusal(grpc.StatusCode.ABORTED, "REVISION_CONFLICT", current_revision="42", key="Director/default/d")
    )
    assert isinstance(err, steward.Conflict)
    assert (err.reason, err.code, err.current_revision) == ("REVISION_CONFLICT", grpc.StatusCode.ABORTED, 42)

    err = errors.from_rpc_error(
        refusal(grpc.StatusCode.UNAVAILABLE, "NOT_APPLIED", retry_s=0.3, leader="127.0.0.1:7002")
    )
    assert isinstance(err, steward.NotApplied) and err.not_applied
    assert err.leader == "127.0.0.1:7002"
    assert err.retry_delay == pytest.approx(0.3)

    # Details whose message differs from the call's (rewritten on the way) still count.
    rewritten = refusal(grpc.StatusCode.ABORTED, "LOCK_BUSY")
    rewritten._details = "forwarded: " + rewritten._details
    assert errors.from_rpc_error(rewritten).reason == "LOCK_BUSY"

    # A reason without a class of its own is classed by its code and keeps the reason.
    err = errors.from_rpc_error(refusal(grpc.StatusCode.NOT_FOUND, "SOMETHING_NEWER"))
    assert isinstance(err, steward.NotFound) and err.reason == "SOMETHING_NEWER"
    err = errors.from_rpc_error(refusal(grpc.StatusCode.FAILED_PRECONDITION, "OPERATION_STATE"))
    assert type(err) is steward.StewardError and err.reason == "OPERATION_STATE"


def test_a_connection_never_made_is_not_applied() -> None:
    never = FakeCall(
        grpc.StatusCode.UNAVAILABLE,
        "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Connection refused",
    )
    err = errors.from_rpc_error(never)
    assert isinstance(err, steward.NotApplied) and err.never_sent and err.not_applied
    # A connection lost after sending is not that.
    lost = errors.from_rpc_error(FakeCall(grpc.StatusCode.UNAVAILABLE, "Socket closed"))
    assert isinstance(lost, steward.Unavailable) and not lost.not_applied
    # Servers before ErrorInfo said "not applied" with a trailer.
    old = FakeCall(grpc.StatusCode.UNAVAILABLE, "no leader", (("x-steward-not-applied", "true"),))
    assert errors.from_rpc_error(old).not_applied


@pytest.mark.parametrize(
    ("failure", "read", "write", "idempotent_write"),
    [
        (refusal(grpc.StatusCode.UNAVAILABLE, "NOT_APPLIED"), True, True, True),
        (refusal(grpc.StatusCode.ABORTED, "AUTH_CHANGED"), True, True, True),
        (refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, "OVERLOADED", retry_s=0.1), True, True, True),
        (refusal(grpc.StatusCode.UNAVAILABLE, "OUTCOME_UNKNOWN"), True, False, True),
        (refusal(grpc.StatusCode.UNAVAILABLE, "UNAVAILABLE"), True, False, True),
        (FakeCall(grpc.StatusCode.UNAVAILABLE, "Socket closed"), True, False, True),
        (refusal(grpc.StatusCode.ABORTED, "REVISION_CONFLICT"), False, False, False),
        (refusal(grpc.StatusCode.ABORTED, "LOCK_BUSY"), False, False, False),
        (refusal(grpc.StatusCode.INTERNAL, "INTERNAL"), False, False, False),
    ],
)
def test_what_is_sent_again(failure: FakeCall, read: bool, write: bool, idempotent_write: bool) -> None:
    err = errors.from_rpc_error(failure)
    assert _may_retry(err, write=False, idempotent=False, attempt_timed_out=False) == read
    assert _may_retry(err, write=True, idempotent=False, attempt_timed_out=False) == write
    assert _may_retry(err, write=True, idempotent=True, attempt_timed_out=False) == idempotent_write
