"""Every call of a named query names one that exists and gives it the parameters it takes.

The declarations are the `.sql` blocks' own (coordinator/db/queries.py); the call
sites are read from the source of the package, its migrations, the tests and
the benchmarks (tests/query_calls.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from coordinator.db.queries import all_queries, parse_named_queries
from tests.query_calls import CallSite, all_call_sites, call_sites, problems

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("coordinator", "migrations", "tests", "bench")

# Call sites whose name or parameters are not literal where the call is, by
# file and function, with where the literal ones are. Keep it short: make a
# call literal rather than add to it.
NOT_LITERAL = {
    ("coordinator/pipeline/archive.py", "verify"): (
        "params: the run's bounds (ArchiveRun.params), the cutoff and max_id of its manifest"
    ),
    ("coordinator/pipeline/report/arrow.py", "__init__"): (
        "name: ReportInput.query_name, set in pipeline/report/run.py"
    ),
    ("coordinator/pipeline/tables.py", "read_named"): (
        "name: the pipeline's jobs pass their pipeline_* names"
    ),
    ("tests/acceptance/test_faults.py", "cut"): "name: each fault test passes its statement",
    (
        "tests/pipeline/test_archive.py",
        "test_the_archive_takes_every_column_of_messages_and_history",
    ): ("name: loops over pipeline_archive_messages and pipeline_archive_history"),
}


def _sites() -> list[CallSite]:
    return list(all_call_sites(ROOT, FOLDERS))


def _not_literal(site: CallSite) -> bool:
    return site.name is None or (site.params is None and site.function != "query")


def test_every_literal_call_site_matches_its_query() -> None:
    queries = all_queries()
    sites = [site for site in _sites() if site.name is not None]
    assert len(sites) > 90
    found = [problem for site in sites for problem in problems(site, queries)]
    assert not found, "\n".join(found)


def test_call_sites_that_are_not_literal_are_the_listed_ones() -> None:
    dynamic = {(str(s.path), s.enclosing) for s in _sites() if _not_literal(s)}
    assert dynamic == NOT_LITERAL.keys()


def test_every_packaged_query_is_called_from_the_package() -> None:
    """A query only the tests or benchmarks run lives beside them, not in the package."""
    text = "\n".join(
        path.read_text()
        for folder in ("coordinator", "migrations")
        for path in (ROOT / folder).rglob("*.py")
    )
    unused = [name for name in all_queries() if f'"{name}"' not in text]
    assert not unused


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ('await fetch_all(conn, "no_such_query", {})', "no query named 'no_such_query'"),
        (
            'await fetch_one(conn, "database_exists", {})',
            "database_exists is not given ['name']",
        ),
        (
            'await fetch_one(conn, "database_exists", {"name": s, "extra": 1})',
            "database_exists takes no ['extra']",
        ),
        (
            'params = {"level": "on"}\n    await fetch_one(conn, "pin_synchronous_commit", params)',
            "pin_synchronous_commit returns no rows to fetch_one",
        ),
        ('await execute(conn, "ping")', "ping returns rows: fetch them"),
        ('conn.execute(query("ping"), {"extra": 1})', "ping takes no ['extra']"),
    ],
)
def test_a_wrong_call_site_is_found(tmp_path: Path, call: str, expected: str) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from coordinator.db.queries import execute, fetch_all, fetch_one, query\n\n\n"
        f"async def planted(conn, g, s):\n    {call}\n"
    )
    [site] = call_sites(planted, tmp_path)
    assert site.path == Path("planted.py") and site.enclosing == "planted"
    found = problems(site, all_queries())
    assert any(expected in problem for problem in found), found


def test_a_wrapper_is_read_at_its_calls(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from coordinator.db.queries import fetch_one\n\n\n"
        "async def _one(conn, name, params):\n    return await fetch_one(conn, name, params)\n\n\n"
        "async def planted(conn):\n"
        '    await _one(conn, "database_exists", {"name": "x"})\n'
        '    await _one(conn, "database_exists", {"nom": "x"})\n'
    )
    right, wrong = call_sites(planted, tmp_path)
    assert (right.enclosing, right.name, right.line) == ("planted", "database_exists", 9)
    assert problems(right, all_queries()) == []
    assert "database_exists takes no ['nom']" in " ".join(problems(wrong, all_queries()))


def test_a_block_declares_its_parameters_and_columns() -> None:
    [declared] = parse_named_queries(
        "-- name: q\n-- returns: a, b,\n-- returns: c\nSELECT %(x)s AS a, %(y)b AS b, %(x)s AS c;\n"
    ).values()
    assert declared.params == {"x", "y"}
    assert declared.returns == ("a", "b", "c")
    assert not declared.text.endswith(";")
