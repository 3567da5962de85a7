"""Database URLs: users give libpq URLs; SQLAlchemy (Alembic) wants its dialect prefix.

A URL may name several servers, in either form libpq takes: hosts and ports
in the authority (`postgresql://u:p@h1:5432,h2:5432/db?target_session_attrs=
read-write`, the form HA guides give) or as lists in the query
(`?host=h1,h2&port=5432,5432`). psycopg, psql and ADBC read both; SQLAlchemy's
URL parser rejects the first (it wants one port), so for SQLAlchemy the hosts
move into the query, which its psycopg dialect hands to libpq unchanged.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, urlencode, urlsplit

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from coordinator.config import POSTGRESQL_URL
from coordinator.domain.database_urls import AUTHORITY_PASSWORD
from coordinator.domain.database_urls import redact as redact

# An authority that names several hosts: a comma before the path or query.
_HOST_LIST = re.compile(r"^[a-z+]+://[^/?#]*,")


def libpq_url(url: str) -> str:
    """The URL psycopg and psql understand (no SQLAlchemy driver suffix, no empty password)."""
    url = POSTGRESQL_URL.sub("postgresql://", url, count=1)
    # pgserver's URLs say `postgres:@`: an empty password is no password.
    return AUTHORITY_PASSWORD.sub(lambda m: m.group(0) if m.group(2) else f"://{m.group(1)}@", url)


def in_schema(url: str, schema: str) -> str:
    """`url` whose sessions start with search_path set to `schema` (libpq's `options`).

    Every connection of the coordinator, and whatever it hands a URL to
    (psql, ADBC, SQLAlchemy), finds the coordinator's objects by their plain
    names and creates nothing elsewhere. A URL whose options already set a
    search_path keeps it.
    """
    parts = urlsplit(url)
    params = _query_params(parts.query)
    options = " ".join(value for name, value in params if name == "options")
    if "search_path" in options:
        return url
    # `schema` is a plain identifier (Settings.database_schema): no quoting needed.
    options = f"{options} -c search_path={schema}".strip()
    params = [(name, value) for name, value in params if name != "options"]
    query = urlencode([*params, ("options", options)], safe=",/:[]", quote_via=quote)
    return parts._replace(query=query).geturl()


def out_of_schema(url: str) -> str:
    """`url` without the search_path `in_schema` adds: sessions as the application's."""
    parts = urlsplit(url)
    params = _query_params(parts.query)
    options = " ".join(value for name, value in params if name == "options")
    kept = _SEARCH_PATH_OPTION.sub("", options).strip()
    params = [(name, value) for name, value in params if name != "options"]
    if kept:
        params.append(("options", kept))
    query = urlencode(params, safe=",/:[]", quote_via=quote)
    return parts._replace(query=query).geturl()


_SEARCH_PATH_OPTION = re.compile(r"-c\s*search_path=\S+")


def _query_params(query: str) -> list[tuple[str, str]]:
    """A URL's query as libpq reads it: `+` is a plus sign, not a space as in HTML forms
    (urllib's parse_qsl would turn a password's `+` into a space)."""
    pairs = []
    for part in query.split("&"):
        if part:
            name, _, value = part.partition("=")
            pairs.append((unquote(name), unquote(value)))
    return pairs


def sqlalchemy_url(url: str) -> str:
    """The same server(s) for SQLAlchemy, always through psycopg 3."""
    if not POSTGRESQL_URL.match(url):
        raise ValueError(f"not a PostgreSQL URL: {redact(url)}")
    if _HOST_LIST.match(url):
        return "postgresql+psycopg://" + _hosts_in_query(libpq_url(url))
    return POSTGRESQL_URL.sub("postgresql+psycopg://", url, count=1)


def _hosts_in_query(url: str) -> str:
    """`user:password@/dbname?host=h1,h2&port=p1,p2&...`: what follows the scheme."""
    params = {key: str(value) for key, value in conninfo_to_dict(url).items()}
    user, password = params.pop("user", None), params.pop("password", None)
    dbname = params.pop("dbname", "")
    if not params.get("port", "x").strip(","):
        del params["port"]  # every host on the default port
    auth = ""
    if user is not None:
        auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "") + "@"
    query = urlencode(params, safe=",/:[]")
    return f"{auth}/{quote(dbname, safe='')}" + (f"?{query}" if query else "")


def psql_arguments(url: str) -> tuple[list[str], dict[str, str]]:
    """psql's arguments for the database at `url`, and the environment for its password.

    The password travels in PGPASSWORD, not on a command line anyone can
    read in the process list.
    """
    params = conninfo_to_dict(libpq_url(url))
    password = params.pop("password", None)
    # Only the order in which one session tries the hosts, and unknown to the
    # libpq of psql before 16 (a Debian 12 psql refuses the whole URL for it).
    params.pop("load_balance_hosts", None)
    environment = {"PGPASSWORD": str(password)} if password else {}
    return ["--dbname", make_conninfo("", **params)], environment
