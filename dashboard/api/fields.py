"""Field types shared by the request models, so a JSON value is validated the way the published schema says."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field


def _json_integer(v: Any) -> Any:
    """JSON Schema's integer: 7 or 7.0, never true/false (Python's bools are ints) nor "7" (a string)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError("must be a JSON integer")
    if isinstance(v, float) and not v.is_integer():
        raise ValueError("must be a whole number")
    return int(v)


INTEGER = BeforeValidator(_json_integer)


def _json_string(v: Any) -> Any:
    """A date-time is a JSON string (pydantic would also take a number of seconds, which the schema does not say)."""
    if v is not None and not isinstance(v, str):
        raise ValueError("must be a string (ISO 8601 with its offset)")
    return v


STRING = BeforeValidator(_json_string)
# What `guard.HostileInput` refuses, published: every string of the API's schema excludes NUL (JSON Schema strings
# are Unicode text, so lone surrogates are out already). `publish_text_rules` adds it to the generated document.
NO_NUL = r"^[^\x00]*$"
# A send's data: flat values, strings without NUL (what a template can render).
Scalar = str | int | float | bool | None


def publish_text_rules(node: Any) -> None:
    """Walk an OpenAPI document: a string without enum or pattern gets NO_NUL; a free-keyed object gets it as
    `propertyNames`."""
    if isinstance(node, dict):
        if node.get("type") == "string" and "enum" not in node and "const" not in node and "pattern" not in node \
                and node.get("format") not in ("uuid", "date-time", "binary"):
            node["pattern"] = NO_NUL
        if node.get("type") == "object" and node.get("additionalProperties") not in (None, False):
            node.setdefault("propertyNames", {"pattern": NO_NUL})
        for v in node.values():
            publish_text_rules(v)
    elif isinstance(node, list):
        for v in node:
            publish_text_rules(v)
# An integer exactly as the OpenAPI schema describes it. Bounds: `x: JsonInt = Field(ge=…)`, or inside an alias
# `Annotated[int, Field(ge=…), INTEGER]` (a Field AFTER the validator would drop out of the published schema).
JsonInt = Annotated[int, INTEGER]


NOTE_MAX = 500
NOTE_DOC = "why (kept in the audit log with the key's actor and the time)"


class NoteIn(BaseModel):
    """The optional body of an action that leaves an audit row: why it was done."""

    model_config = ConfigDict(extra="forbid")
    note: str = Field("", max_length=NOTE_MAX, description=NOTE_DOC)


def note_of(body: NoteIn | None) -> str:
    return body.note.strip() if body is not None else ""
