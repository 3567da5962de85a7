"""The RocketMQ 5 gRPC door: `apache.rocketmq.v2.MessagingService` on the same core.

The official RocketMQ 5 clients (Java, Python, Node.js, Go, ...) talk to the
coordinator unmodified: `coordinator serve --grpc-port PORT`. Nothing here is
imported unless gRPC is on; the generated protocol modules come from the
`rocketmq-python-client` package (the `grpc` extra), see `stubs.py`.

`server.py` serves `service.MessagingService`, whose RPCs are the methods
of its parts (`producing.py`, `consuming.py`, `assignment.py`, `session.py`,
`unsupported.py`); each is a thin call into the core.
"""
