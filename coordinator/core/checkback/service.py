"""The check-back engine (RocketMQ's 回查, done on Postgres): its parts, one per job.

`producers` keeps the instances of each producer group (`registry.py`),
`rounds` claims due half messages and dispatches their checks (`rounds.py`;
pushes and database checks run on in `push_checks.py` and
`database_checks.py`), `pull` answers the instances' long polls
(`pull.py`), `operator` re-arms and resolves by hand (`operator.py`).
"""

from __future__ import annotations

from coordinator.core.checkback.operator import OperatorActions
from coordinator.core.checkback.pull import CheckPolls
from coordinator.core.checkback.registry import ProducerRegistry
from coordinator.core.checkback.rounds import CheckRounds
from coordinator.core.configs import CheckBackConfig
from coordinator.core.context import CoreContext, EndTransaction


class CheckBack:
    """The check-back's parts, built on one context and config; callers use the parts."""

    def __init__(self, context: CoreContext, config: CheckBackConfig, end: EndTransaction) -> None:
        self._context = context
        self.producers = ProducerRegistry(context, config)
        # `end` applies the answers that pushes and database checks carry
        self.rounds = CheckRounds(context, config, end)
        self.pull = CheckPolls(context, config)
        self.operator = OperatorActions(context, config)
