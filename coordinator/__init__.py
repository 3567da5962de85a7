"""coordinator: RocketMQ-style transactional messages with all state in PostgreSQL."""

__version__ = "0.1.0"
