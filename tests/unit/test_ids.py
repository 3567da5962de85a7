"""The ids the coordinator and the SDK mint: 32 hex digits, time first, then random bits."""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import pytest

from coordinator.client._protocol import new_message_id as sdk_message_id
from coordinator.core.ids import new_message_id, new_transaction_id

MINTERS: dict[str, tuple[Callable[[], str], str]] = {
    "message id": (new_message_id, r"[0-9A-F]{32}"),
    "transaction id": (new_transaction_id, r"[0-9a-f]{32}"),
    "SDK message id": (sdk_message_id, r"[0-9A-F]{32}"),
}


@pytest.mark.parametrize("name", list(MINTERS))
def test_ids_are_hex_unique_and_ordered_by_their_minting_time(name: str) -> None:
    mint, pattern = MINTERS[name]
    before = time.time_ns() // 1_000_000
    earlier = [mint() for _ in range(1000)]
    after = time.time_ns() // 1_000_000
    time.sleep(0.002)
    later = mint()
    assert all(re.fullmatch(pattern, value) for value in [*earlier, later])
    assert len(set(earlier)) == len(earlier)
    # Led by the millisecond: a later id sorts after every earlier one, so a
    # unique index takes new ids at its right edge.
    assert all(value < later for value in earlier)
    assert all(before <= int(value[:12], 16) <= after for value in earlier)
    # 80 random bits after the time: ids of one millisecond differ there.
    assert len({value[12:] for value in earlier}) == len(earlier)
