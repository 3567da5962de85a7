"""The run's processes: coordinator nodes, producers and consumers, started and kept running.

Whatever ends is started again and counted by why it ended: a producer's own
SIGKILL (a behavior the soak draws) is a kill; anything else is an unplanned
exit, listed in the report. Nodes that chaos killed are left to chaos.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from bench.soak import children
from bench.soak.consumer import ConsumerConfig
from bench.soak.layout import CONSUMER_GROUPS, Layout
from bench.soak.nodes import Node
from bench.soak.producer import ProducerConfig

REPO = Path(__file__).resolve().parents[2]
NODE_RESTART_SECONDS = 1.0  # a node that died on its own is started again after this
STARTUP_SECONDS = 120.0
FORCED_KILL_AT = (10, 120)  # which transaction of a first-generation producer kills it

# Short timings, so that check-backs and redeliveries happen many times in a
# run of minutes. The check budget outlasts the longest outage chaos makes
# (a few seconds) many times over: a message discarded for want of an
# answer would be a soak that cannot pass, not a finding.
NODE_SETTINGS = {
    "transaction_timeout_seconds": "2",
    "check_interval_seconds": "1",
    "check_max": "30",
    "check_scan_interval_seconds": "0.5",
    # A killed producer's instance stops getting check requests this soon
    # (the SDK producers here heartbeat every second).
    "producer_ttl_seconds": "4",
    "check_poll_fallback_seconds": "1",
    "pool_max_size": "8",
}


@dataclass(frozen=True)
class ClientOptions:
    producers: int
    seed: int
    think_seconds: float  # a producer's pause between transactions, at most
    consumer_threads: int  # per consumer group (one process each)
    no_ack_probability: float
    invisible_seconds: float


@dataclass
class Supervision:
    producer_kills: int = 0  # a producer's own SIGKILL between half message and end
    producer_exits: int = 0  # any other end of a producer: a bug in the soak or the SDK
    node_exits: int = 0  # a node that died without chaos (e.g. started while Postgres was away)
    consumer_exits: int = 0


@dataclass
class ProducerSlot:
    index: int
    generation: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return f"p{self.index}.{self.generation}"


class Supervisor:
    def __init__(
        self,
        layout: Layout,
        options: ClientOptions,
        database_url: str,
        truth_url: str,
        nodes: int,
        report: Callable[[str], None],
    ) -> None:
        self.layout = layout
        self.options = options
        self.truth_url = truth_url
        self.report = report
        self.counts = Supervision()
        self.nodes = [
            Node(index, database_url, NODE_SETTINGS, layout.logs / f"node{index}.log")
            for index in range(nodes)
        ]
        self.producers = [ProducerSlot(index) for index in range(options.producers)]
        self.consumers: dict[str, subprocess.Popen[bytes]] = {}
        self._node_started_at: dict[int, float] = {}

    @property
    def producer_names(self) -> list[str]:
        """The producer processes running now (a restarted one has a new name)."""
        return [slot.name for slot in self.producers]

    # starting ------------------------------------------------------------------
    def start_nodes(self) -> None:
        for node in self.nodes:
            self._start_node(node)
        deadline = time.monotonic() + STARTUP_SECONDS
        waiting = list(self.nodes)
        while waiting:
            for node in list(waiting):
                if not node.alive:
                    raise RuntimeError(f"node {node.index} exited at start; see {node.log}")
                if node.healthy():
                    waiting.remove(node)
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes did not become healthy; see {self.layout.logs}")
            time.sleep(0.2)

    def start_clients(self) -> None:
        for name in CONSUMER_GROUPS:
            self._start_consumer(name)
        for slot in self.producers:
            self._start_producer(slot)

    def _start_node(self, node: Node) -> None:
        node.start()
        self._node_started_at[node.index] = time.monotonic()

    def _start_producer(self, slot: ProducerSlot) -> None:
        config = ProducerConfig(
            name=slot.name,
            endpoints=[node.url for node in self.nodes],
            truth_url=self.truth_url,
            producer_group=self.layout.producer_group,
            topic=self.layout.topic,
            run=self.layout.run_id,
            seed=self.options.seed,
            journal=str(self.layout.producer_journals / f"{slot.name}.jsonl"),
            stop_load_file=str(self.layout.stop_load_file),
            think_seconds=self.options.think_seconds,
            kill_at=self._kill_at(slot),
        )
        slot.process = self._spawn(
            "bench.soak.producer", config.to_json(), f"producer-{slot.name}.log"
        )

    def _kill_at(self, slot: ProducerSlot) -> int | None:
        """A first generation dies for certain, early enough for a short run."""
        if slot.generation > 0:
            return None
        return random.Random(f"{self.options.seed}:kill:{slot.index}").randint(*FORCED_KILL_AT)

    def _start_consumer(self, name: str) -> None:
        journals = self.layout.consumer_journals(name)
        generation = sum(1 for _ in journals.glob("*.jsonl"))
        config = ConsumerConfig(
            name=f"c{name}.{generation}",
            endpoints=[node.url for node in self.nodes],
            consumer_group=self.layout.consumer_group(name),
            topic=self.layout.topic,
            seed=self.options.seed,
            journal=str(journals / f"c{name}.{generation}.jsonl"),
            threads=self.options.consumer_threads,
            no_ack_probability=self.options.no_ack_probability,
            invisible_seconds=self.options.invisible_seconds,
        )
        # The journal file exists from now on, so the next generation counts it.
        Path(config.journal).touch()
        self.consumers[name] = self._spawn(
            "bench.soak.consumer", config.to_json(), f"consumer-{config.name}.log"
        )

    def _spawn(self, module: str, config_json: str, log: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
        return children.spawn(
            [sys.executable, "-m", module, config_json],
            log=self.layout.logs / log,
            env=env,
            cwd=REPO,
        )

    # watching --------------------------------------------------------------------
    def supervise(self, down_on_purpose: Collection[int]) -> None:
        """Start again whatever ended, and count why it ended."""
        self._supervise_producers()
        self._supervise_nodes(down_on_purpose)
        self._supervise_consumers()

    def _supervise_producers(self) -> None:
        for slot in self.producers:
            if slot.process is None or slot.process.poll() is None:
                continue
            if self._held_down(slot):
                continue
            code = slot.process.returncode
            if code == -signal.SIGKILL:
                self.counts.producer_kills += 1
            else:
                self.counts.producer_exits += 1
                self._event(f"producer {slot.name} exited with {code}")
            slot.generation += 1
            # Also while settling: a new producer sends nothing once the
            # load has stopped, but answers check-backs.
            self._start_producer(slot)

    def _held_down(self, slot: ProducerSlot) -> bool:
        """Whether an ended producer is kept down on purpose for now (none is, here)."""
        return False

    def _supervise_nodes(self, down_on_purpose: Collection[int]) -> None:
        for node in self.nodes:
            if node.alive or node.index in down_on_purpose:
                continue
            if time.monotonic() - self._node_started_at[node.index] < NODE_RESTART_SECONDS:
                continue
            self.counts.node_exits += 1
            code = node.process.returncode if node.process else None
            self._event(f"node {node.index} exited with {code}; starting it again")
            self._start_node(node)

    def _supervise_consumers(self) -> None:
        for name, process in self.consumers.items():
            if process.poll() is not None:
                self.counts.consumer_exits += 1
                self._event(f"consumer of group {name} exited with {process.returncode}")
                self._start_consumer(name)

    def _event(self, what: str) -> None:
        self.report(what)

    # stopping ----------------------------------------------------------------------
    def stop_clients(self) -> None:
        """Producers and consumers, together; producers deregister on the way out."""
        processes = [s.process for s in self.producers if s.process] + list(self.consumers.values())
        children.stop_all(processes, grace_seconds=20)

    def stop_nodes(self) -> None:
        children.stop_all([n.process for n in self.nodes if n.process], grace_seconds=20)
