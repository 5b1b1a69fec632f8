"""How a template's text is filled from a message's data — at send time (`templates.render_for_send`) and when the
message page shows what was sent, its code masked (`domain.support.message.body_as_sent`). Pure."""

from __future__ import annotations

from typing import Any


class _Format(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def render(body: str, data: dict[str, Any]) -> str:
    """Template text with `{name}` filled from the message's data; an unknown name stays visible as `{name}`."""
    return body.format_map(_Format({k: v for k, v in data.items() if isinstance(k, str)}))
