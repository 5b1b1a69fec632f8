"""Templates are text: the newest version for a channel, rendered at send time; the version used is kept on the
ledger row. A one-time code is derived now and rendered into this request only, never stored."""

from __future__ import annotations

from typing import Any

from domain.db import UnitOfWork
from domain.ledger import otp, sql
from domain.ledger.render import render


def render_for_send(uow: UnitOfWork, *, notification_id: int, template: str, channel: str,
                    payload: dict[str, Any]) -> str | None:
    """The text of one message about to be sent; None when no version of the template covers the channel."""
    t = uow.execute(sql.NEWEST_TEMPLATE, {"n": template, "c": channel}).first()
    if t is None:
        return None
    uow.execute(sql.KEEP_TEMPLATE_VERSION, {"v": t.version, "id": notification_id})
    data = dict(payload)
    if template == otp.TEMPLATE:
        data["code"] = otp.code_for_send(uow, notification_id) or ""
    return render(t.body, data)
