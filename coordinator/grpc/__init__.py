"""The RocketMQ 5 gRPC door: `apache.rocketmq.v2.MessagingService` on the same core.

The official RocketMQ 5 clients (Java, Python, Node.js, Go, ...) talk to the
coordinator unmodified: `coordinator serve --grpc-port PORT`. Nothing here is
imported unless gRPC is on; the generated protocol modules come from the
`rocketmq-python-client` package (the `grpc` extra), see `stubs.py`.

- `server.py`: the grpc.aio server, a door the node starts
- `service.py`: the service assembled from its parts, each RPC a thin call into the core:
  `producing.py` (send, end), `consuming.py` (receive, ack, invisibility,
  dead letters), `assignment.py` (a topic's one queue: routes and a
  PushConsumer's assignment), `session.py` (route, heartbeat, Telemetry,
  termination) and `unsupported.py`; `calls.py` holds what every RPC shares
- `telemetry.py`: a client's Telemetry stream (Settings, check-backs);
  `consumer_settings.py` what a consumer's Settings are answered with (its
  group's FIFO flag and retry policy)
- `convert.py`: RocketMQ messages to and from the core's, resolutions, and the
  topic-is-the-producer-group rule
- `bodies.py`: GZIP bodies unpacked within max_body_bytes and max_request_bytes,
  off the event loop
- `status.py`: core errors as RocketMQ status codes
- `credentials.py`: the `authorization` header (MQv2-HMAC-SHA1)
"""
