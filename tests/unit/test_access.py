"""The permission checks every door makes, and the per-token limits."""

from __future__ import annotations

import pytest

from coordinator.config import Settings
from coordinator.core.auth import Authenticator, Limits
from coordinator.core.configs import LimitsConfig, ServiceConfigs, open_allowed
from coordinator.core.context import CoreContext
from coordinator.core.tokens import check_grants
from coordinator.domain.access import Grants, Principal
from coordinator.domain.errors import InvalidMessage, PermissionDenied, RateLimited

PRODUCER = Principal("orders-svc", Grants(("orders", "audit-*"), ("order-*",)))
CONSUMER = Principal("billing", Grants(consume_groups=("billing",), consume_topics=("orders",)))
METRICS = Principal("prometheus", Grants(metrics=True))
ADMIN = Principal("ops", Grants(admin=True))


def test_a_producer_sends_only_to_its_topics_as_its_groups() -> None:
    PRODUCER.require_produce("orders", "order-svc")
    PRODUCER.require_produce("audit-eu", "order-batch")
    PRODUCER.require_produce("orders", None)  # a normal message names no group
    with pytest.raises(PermissionDenied, match="send to topic 'payments'"):
        PRODUCER.require_produce("payments", "order-svc")
    with pytest.raises(PermissionDenied, match="producer group 'billing-svc'"):
        PRODUCER.require_produce("orders", "billing-svc")


def test_ends_and_check_backs_belong_to_the_producer_group() -> None:
    PRODUCER.require_producer_group("order-svc")
    with pytest.raises(PermissionDenied, match="'orders-svc' may not act for producer group"):
        PRODUCER.require_producer_group("payment-svc")
    with pytest.raises(PermissionDenied):
        CONSUMER.require_producer_group("order-svc")


def test_a_consumer_acts_only_as_its_groups_on_its_topics() -> None:
    CONSUMER.require_consume("billing", "orders")
    CONSUMER.require_consumer_group("billing")
    with pytest.raises(PermissionDenied, match="consumer group 'shipping'"):
        CONSUMER.require_consumer_group("shipping")
    with pytest.raises(PermissionDenied, match="consume topic 'payments'"):
        CONSUMER.require_consume("billing", "payments")
    with pytest.raises(PermissionDenied):
        PRODUCER.require_consumer_group("billing")


def test_a_message_is_read_by_its_producer_group_or_an_admin() -> None:
    PRODUCER.require_read_message("order-svc")
    ADMIN.require_read_message("anything")
    for who, group in [(PRODUCER, "billing-svc"), (PRODUCER, None), (CONSUMER, "order-svc")]:
        with pytest.raises(PermissionDenied, match="another producer group"):
            who.require_read_message(group)


def test_admin_may_do_everything_and_metrics_only_metrics() -> None:
    ADMIN.require_admin("requeue dead letters")
    ADMIN.require_produce("any", "group")
    ADMIN.require_consume("any", "topic")
    ADMIN.require_metrics()
    METRICS.require_metrics()
    with pytest.raises(PermissionDenied, match="needs the admin permission"):
        METRICS.require_admin("read the status")
    with pytest.raises(PermissionDenied, match="needs the metrics permission"):
        PRODUCER.require_metrics()


def test_the_anonymous_principal_may_do_everything() -> None:
    anonymous = Principal.anonymous()
    anonymous.require_admin("anything")
    anonymous.require_produce("t", "g")
    anonymous.require_consume("g", "t")


def test_grants_are_checked_before_a_token_is_made() -> None:
    assert check_grants(Grants(("orders", "orders"), ("g",))).produce_topics == ("orders",)
    assert check_grants(Grants(admin=True)).permissions == ("admin", "metrics")
    for grants, error in [
        (Grants(), "at least one permission"),
        (Grants(produce_topics=("orders",)), "both topics and producer groups"),
        (Grants(consume_groups=("billing",)), "both consumer groups and topics"),
        (Grants(("orders",), (" g",)), "non-empty name or glob"),
        (Grants(("",), ("g",)), "non-empty name or glob"),
    ]:
        with pytest.raises(InvalidMessage, match=error):
            check_grants(grants)


def _limits(**settings: float) -> LimitsConfig:
    return ServiceConfigs.from_settings(Settings(**settings)).auth.limits


def test_a_token_over_its_rate_is_refused_until_its_bucket_refills() -> None:
    limits = Limits(_limits(rate_limit_per_second=0.001, rate_limit_burst=3))
    for _ in range(3):
        limits.take_request(PRODUCER)
    with pytest.raises(RateLimited, match="over its rate"):
        limits.take_request(PRODUCER)
    limits.take_request(CONSUMER)  # every token has its own bucket


def test_a_rate_of_zero_means_no_limit() -> None:
    limits = Limits(_limits(rate_limit_per_second=0, rate_limit_burst=1))
    for _ in range(100):
        limits.take_request(PRODUCER)


def test_long_polls_per_token_are_bounded_and_released() -> None:
    limits = Limits(_limits(max_long_polls_per_token=2))
    with limits.long_poll(PRODUCER), limits.long_poll(PRODUCER):
        with pytest.raises(RateLimited, match="holds 2 long polls"), limits.long_poll(PRODUCER):
            pass
        with limits.long_poll(CONSUMER):
            pass
    with limits.long_poll(PRODUCER):  # released when the polls returned
        pass


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.5.6.7", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.8", False),
        ("example.org", False),
    ],
)
def test_only_loopback_addresses_may_serve_without_tokens(host: str, loopback: bool) -> None:
    assert open_allowed(Settings(host=host)) is loopback
    assert open_allowed(Settings(host=host, insecure=True)) is True


def test_without_authentication_no_limit_applies() -> None:
    # No tokens: nobody to tell apart, so no shared budget throttles everyone.
    settings = Settings(rate_limit_per_second=0.001, rate_limit_burst=1, max_long_polls_per_token=1)
    config = ServiceConfigs.from_settings(settings).auth
    limits = Limits(config.limits)
    anonymous = Authenticator(CoreContext(None), config).authenticate(None)  # type: ignore[arg-type]
    for _ in range(10):
        limits.take_request(anonymous)
    with limits.long_poll(anonymous), limits.long_poll(anonymous):
        pass
