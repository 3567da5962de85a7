"""Output models: the JSON shape of what the core holds, whoever shows it.

The HTTP API answers with these models and the CLI's `--json` prints the
same objects, so neither owns them. They do no I/O: pydantic turns a
record of the core into JSON, nothing more.
"""
