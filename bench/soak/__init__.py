"""The consistency soak: real processes, real faults, and a verdict on what consumers got.

`python -m bench.soak` starts its own PostgreSQL, several `coordinator serve`
nodes, producer processes whose local transactions commit, roll back, answer
unknown, raise or die between the half message and the end (their truth in a
database of their own, through the barrier helper), and consumers in two
groups; a chaos loop kills nodes and restarts Postgres meanwhile. At the end
every consumer group must have received exactly the messages whose local
transaction committed (see docs/operations.md#consistency-soak).
`--exactly-once` runs the same machinery with the barrier, database check
sources and the consumer inbox, and judges the consumers' own tables
(bench/soak/exactly_once, docs/exactly-once.md#the-soak).
"""
