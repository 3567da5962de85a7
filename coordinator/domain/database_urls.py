"""Database URLs as people may see them: never with a password.

A libpq URL may carry its password in the authority (`user:secret@`) or as
a parameter (`?password=secret`); a multi-host URL (`h1:p1,h2:p2`) carries it
once, in front of the first host. Both places are masked.
"""

from __future__ import annotations

import re

# The user and the password of a URL's authority: `://user:password@`.
AUTHORITY_PASSWORD = re.compile(r"://([^:/@?#]*):([^@/?#]*)@")
# A `password=` parameter of a URL's query.
QUERY_PASSWORD = re.compile(r"([?&]password=)[^&#]*", re.IGNORECASE)


def redact(url: str) -> str:
    """The URL with its password hidden, for logs and error messages; no password, no mask."""
    url = AUTHORITY_PASSWORD.sub(
        lambda m: f"://{m.group(1)}:***@" if m.group(2) else f"://{m.group(1)}@", url
    )
    return QUERY_PASSWORD.sub(r"\1***", url)
