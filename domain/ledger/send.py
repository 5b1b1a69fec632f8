"""The send API's way in: a request for one message (`send`) validated — its lane, its recipient (by id, this
tenant's only), its template's version for the channel — then written through `write.ledger_message` in one
transaction. `SendRefused` says, in a code and in plain words, why a request cannot become a message; the one-time
codes and the campaigns ask the same questions (`recipient_ref`, `check_template`) before they ledger.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Engine

from domain.db import UnitOfWork
from domain.ledger import sql
from domain.ledger.write import Ledgered, NewMessage, ledger_message
from domain.vocabulary import LANES, is_lane


class SendRefused(ValueError):
    """The request cannot become a message: `code` for the API, the message in plain words."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def recipient_ref(uow: UnitOfWork, tenant_id: int, recipient_id: int) -> str | None:
    """The ledger names people by ref; None when the id is not this tenant's (or does not exist)."""
    ref = uow.execute(sql.RECIPIENT_REF, {"t": tenant_id, "i": recipient_id}).scalar()
    return str(ref) if ref is not None else None


def check_template(uow: UnitOfWork, template: str, channel: str) -> None:
    """The template exists and has a version for this channel (its newest version decides)."""
    channels = uow.execute(sql.TEMPLATE_CHANNELS, {"n": template}).scalar()
    if channels is None:
        raise SendRefused("unknown_template", f"no template named {template!r}")
    if channel not in channels:
        raise SendRefused("channel_not_in_template",
                          f"template {template!r} has no {channel} version; it has {', '.join(channels)}")


def send(*, tenant_id: int, recipient_id: int, channel: str, template: str, lane: str, data: dict[str, Any],
         subject_period: str, engine: Engine | None = None) -> Ledgered | None:
    """The send API's one transaction: validate, then ledger (existing key means skip). None: no such recipient
    for this tenant (another tenant's id looks exactly the same)."""
    if not is_lane(lane):
        raise SendRefused("unknown_lane", f"unknown lane {lane!r}; lanes are {', '.join(LANES)}")
    with UnitOfWork(engine) as uow:
        ref = recipient_ref(uow, tenant_id, recipient_id)
        if ref is None:
            return None
        check_template(uow, template, channel)
        row = ledger_message(uow, NewMessage(tenant_id=tenant_id, recipient=ref, channel=channel, lane=lane,
                                             template=template, subject=subject_period, payload=data))
        uow.commit()
    return row
