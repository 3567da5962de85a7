"""The lifecycle figures, computed by Spark from one row per half message.

Input columns: id, producer_group, topic, state, check_count, born_at,
resolved_at. The same figures as SQL are the named query
`pipeline_report_reference`; the tests hold the two to each other.

- counts by state: prepared, committed, rolled_back, discarded, expired
- latency: seconds from prepare (born_at) to resolution (resolved_at) of the
  messages their producer resolved (committed or rolled back; a discard or an
  expiry is the coordinator giving up, reported as rates instead), p50, p90
  and p99, exact (linear interpolation, as PostgreSQL's percentile_cont)
- check-backs: messages checked at least once, mean and maximum check count;
  the full distribution is check_count_distribution()
- discard_rate, expiry_rate: discarded (expired) messages / all messages
- pending ages: seconds from born_at to `as_of` of the still prepared
  messages, p50 and maximum
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

STATES = ("prepared", "committed", "rolled_back", "discarded", "expired")
PRODUCER_RESOLVED = ("committed", "rolled_back")
HOURLY_KEYS = ("producer_group", "topic", "hour")
TOTAL_KEYS = ("producer_group", "topic")
PERCENTILES = (0.5, 0.9, 0.99)


def _seconds_between(start: Column, end: Column) -> Column:
    return (F.unix_micros(end) - F.unix_micros(start)) / F.lit(1_000_000.0)


def epoch_micros(moment: datetime) -> int:
    """Exact microseconds since 1970 of an aware datetime (no float rounding)."""
    return (moment - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def with_hour(messages: DataFrame) -> DataFrame:
    """Adds `hour`: the UTC hour the message was born in (the session time zone is UTC)."""
    return messages.withColumn("hour", F.date_trunc("hour", F.col("born_at")))


def lifecycle_figures(messages: DataFrame, keys: Sequence[str], as_of: datetime) -> DataFrame:
    """One row of figures per value of `keys` (e.g. producer group, topic, hour)."""
    state = F.col("state")
    latency = F.when(
        state.isin(*PRODUCER_RESOLVED), _seconds_between(F.col("born_at"), F.col("resolved_at"))
    )
    as_of_column = F.timestamp_micros(F.lit(epoch_micros(as_of)))
    pending_age = F.when(state == "prepared", _seconds_between(F.col("born_at"), as_of_column))
    counts = [F.sum((state == s).cast("long")).alias(s) for s in STATES]
    figures = messages.groupBy(*keys).agg(
        F.count(F.lit(1)).alias("messages"),
        *counts,
        F.percentile(latency, list(PERCENTILES)).alias("latency_s"),
        F.sum((F.col("check_count") > 0).cast("long")).alias("checked"),
        F.avg("check_count").alias("check_count_mean"),
        F.max("check_count").alias("check_count_max"),
        F.percentile(pending_age, 0.5).alias("pending_age_p50_s"),
        F.max(pending_age).alias("pending_age_max_s"),
    )
    return figures.select(
        *keys,
        "messages",
        *STATES,
        F.col("latency_s")[0].alias("latency_p50_s"),
        F.col("latency_s")[1].alias("latency_p90_s"),
        F.col("latency_s")[2].alias("latency_p99_s"),
        "checked",
        "check_count_mean",
        "check_count_max",
        (F.col("discarded") / F.col("messages")).alias("discard_rate"),
        (F.col("expired") / F.col("messages")).alias("expiry_rate"),
        "pending_age_p50_s",
        "pending_age_max_s",
    )


def check_count_distribution(messages: DataFrame, keys: Sequence[str]) -> DataFrame:
    """Messages per check count, per value of `keys`."""
    return messages.groupBy(*keys, "check_count").agg(F.count(F.lit(1)).alias("messages"))
