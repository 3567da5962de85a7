"""The vocabulary: states, errors, models and input rules. No I/O.

Everything above imports this package; it imports nothing of the
coordinator's but itself.
"""
