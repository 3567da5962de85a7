"""How a message body travels in JSON: base64 always, text too when it is UTF-8."""

from __future__ import annotations

import base64


def body_fields(body: bytes) -> dict[str, str | None]:
    try:
        text: str | None = body.decode()
    except UnicodeDecodeError:
        text = None
    return {"body_base64": base64.b64encode(body).decode(), "body_text": text}
