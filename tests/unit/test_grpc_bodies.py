"""GZIP bodies of the gRPC door: unpacked as `gzip` reads them, within their bounds."""

from __future__ import annotations

import asyncio
import gzip
import zlib

import pytest

from coordinator.domain.errors import CoordinatorError, InvalidMessage
from coordinator.grpc.bodies import LOOP_SLICE_BYTES, RequestBudget, gunzip
from coordinator.grpc.status import DoorError

KIB = 1024


def unpacked(data: bytes, max_body: int = 64 * KIB, budget: RequestBudget | None = None) -> bytes:
    return asyncio.run(gunzip(data, max_body, budget or RequestBudget(1024 * KIB)))


@pytest.mark.parametrize(
    "body",
    [b"", b"hello", bytes(range(256)) * 200, bytes(3 * LOOP_SLICE_BYTES)],
    ids=["empty", "short", "past a slice", "three slices"],
)
def test_a_body_unpacks_as_gzip_reads_it(body: bytes) -> None:
    assert unpacked(gzip.compress(body), max_body=len(body) or 1) == body


def test_members_one_after_the_other_and_zero_padding_unpack_like_gzip() -> None:
    data = gzip.compress(b"one ") + zlib.compress(b"two ") + gzip.compress(b"three") + bytes(8)
    assert unpacked(data) == b"one two three"


@pytest.mark.parametrize(
    "data",
    [b"", b"not gzip", gzip.compress(b"x" * 1000)[:-9], gzip.compress(b"x") + b"junk"],
    ids=["nothing", "not gzip", "cut short", "junk after"],
)
def test_what_does_not_unpack_is_a_sentence(data: bytes) -> None:
    with pytest.raises(InvalidMessage, match=r"^the GZIP body does not unpack"):
        unpacked(data)


def test_a_body_past_max_body_bytes_stops_one_byte_past_it() -> None:
    budget = RequestBudget(1024 * KIB)
    with pytest.raises(DoorError, match="max_body_bytes=4096") as refused:
        unpacked(gzip.compress(bytes(512 * KIB)), max_body=4 * KIB, budget=budget)
    assert refused.value.rocketmq_code == "MESSAGE_BODY_TOO_LARGE"
    assert budget.left == 1024 * KIB - 4 * KIB - 1


def test_the_request_budget_is_shared_by_its_bodies() -> None:
    budget = RequestBudget(10 * KIB)
    assert len(unpacked(gzip.compress(bytes(8 * KIB)), budget=budget)) == 8 * KIB
    with pytest.raises(CoordinatorError, match="max_request_bytes=10240"):
        unpacked(gzip.compress(bytes(4 * KIB)), budget=budget)
    assert budget.left == 0
    assert unpacked(gzip.compress(b""), budget=budget) == b""
