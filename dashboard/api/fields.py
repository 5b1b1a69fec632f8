"""Field types shared by the request models, so a JSON value is validated the way the published schema says."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator


def _json_integer(v: Any) -> Any:
    """JSON Schema's integer: 7 or 7.0, never true/false (Python's bools are ints) nor "7" (a string)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError("must be a JSON integer")
    if isinstance(v, float) and not v.is_integer():
        raise ValueError("must be a whole number")
    return int(v)


# Use with Field(ge=…, le=…) for the bounds: JsonInt = an integer exactly as the OpenAPI schema describes it.
JsonInt = Annotated[int, BeforeValidator(_json_integer)]
