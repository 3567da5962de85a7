"""The ceiling of every long poll's wait: a receive, a check-request poll, a gRPC receive.

max_long_poll_seconds may lower it, never raise it: a poll held longer would
outlast the HTTP clients' and proxies' usual 60 s idle timeouts.
"""

from __future__ import annotations

LONGEST_POLL_SECONDS = 60.0
