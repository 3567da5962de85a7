"""Database layer: schema, named queries, pool, embedded server and migrations."""
