"""The RocketMQ 5 gRPC door: `apache.rocketmq.v2.MessagingService` on the same core.

The official RocketMQ 5 clients (Java, Python, Node.js, Go, ...) talk to the
coordinator unmodified: `coordinator serve --grpc-port PORT`. Nothing here is
imported unless gRPC is on; the generated protocol modules come from the
`rocketmq-python-client` package (the `grpc` extra), see `stubs.py`.

- `server.py`: the grpc.aio server, started in the app's lifespan
- `service.py`: the RPCs, each a thin call into the core
- `telemetry.py`: a client's Telemetry stream (Settings, check-backs)
- `convert.py`: RocketMQ messages to and from the core's
- `status.py`: core errors as RocketMQ status codes
- `credentials.py`: the `authorization` header (MQv2-HMAC-SHA1)
"""
