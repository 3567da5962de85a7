"""What a failover load runs: how many clients of each kind, where, and for how long at most."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LoadConfig:
    http_url: str  # the coordinator's HTTP base URL
    grpc_target: str | None = None  # host:port of its gRPC door; needed by gRPC clients
    topic: str = "failover"
    http_producers: int = 4
    grpc_producers: int = 4
    http_consumers: int = 2  # threads of consumer group `http_group`
    grpc_consumers: int = 2  # threads of consumer group `grpc_group`
    http_group: str = "billing"
    grpc_group: str = "shipping"
    # Over gRPC a transaction's producer group is its topic.
    http_producer_group: str = "failover-http"
    commit_share: float = 0.8  # of ends; the rest roll back
    seed: int = 0
    retry_horizon: float = 60.0  # seconds a request is sent again for, from its first attempt
    request_timeout: float = 30.0  # one attempt's bound, beyond a long poll's wait
    wait_seconds: float = 1.0  # consumers' long poll
    invisible_seconds: float = 10.0  # a received message not acked comes back after this
    longest_run: float = 1800.0  # every thread stops by itself this long after the start
    token: str | None = None  # for both doors, when the coordinator has tokens

    def __post_init__(self) -> None:
        if (self.grpc_producers or self.grpc_consumers) and not self.grpc_target:
            raise ValueError("gRPC producers or consumers need grpc_target")
        if not 0.0 <= self.commit_share <= 1.0:
            raise ValueError(f"commit_share must be within 0..1, got {self.commit_share}")

    @property
    def groups(self) -> tuple[str, ...]:
        """The consumer groups that consume (each subscribes when the load starts)."""
        return tuple(
            group
            for group, threads in (
                (self.http_group, self.http_consumers),
                (self.grpc_group, self.grpc_consumers),
            )
            if threads
        )
