"""A running coordinator node: the core and its doors, started and stopped in order.

`coordinator serve` builds one node per process. The doors (HTTP, the
RocketMQ gRPC door) are peers: each receives the core and the authenticator
and knows nothing of the others.
"""

from coordinator.node.doors import configured_doors
from coordinator.node.running import Door, Node, running_node

__all__ = ["Door", "Node", "configured_doors", "running_node"]
