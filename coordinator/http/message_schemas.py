"""What every request body shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RequestIn(BaseModel):
    """A request body: a field the model does not declare is refused (422), not ignored."""

    model_config = ConfigDict(extra="forbid")
