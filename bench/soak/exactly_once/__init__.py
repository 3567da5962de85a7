"""The exactly-once soak: `python -m bench.soak --exactly-once`.

The consistency soak's machinery (its PostgreSQL, nodes, chaos, journals),
with what makes the effect exactly once end to end (docs/exactly-once.md):
producers write orders under the barrier and register their database as
their group's check source (some groups `only`, some `fallback`), so half
messages of killed producers settle with no producer alive; consumers in two
groups, several processes each, write each order to their group's own
database through the inbox, which skips redeliveries. Chaos SIGKILLs
producer processes, consumer processes and coordinator nodes. At the end
each group's `orders` table must hold exactly the orders committed in the
producers' database, each once, and nothing may be left prepared.
"""
