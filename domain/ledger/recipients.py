"""Recipients: contact points, timezone, quiet hours, daily cap and per-channel opt-outs — every change kept
(who, what, when) in `recipient_changes`, which is how "opted out of SMS on 2026-11-28 by support" is answered.

Validation is here, not in the edges: an unknown timezone or channel is a `RecipientError` naming the field, and
nothing is written.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import time
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork, like_escape
from domain.ledger import sql

PEOPLE_CHANNELS: Final[tuple[str, ...]] = ("email", "sms", "whatsapp")


EDITABLE = ("display_name", "email", "phone", "timezone", "quiet_start", "quiet_end", "daily_cap",
            "opted_out_channels")


class RecipientError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


class DuplicateRecipient(Exception):
    def __init__(self, recipient_id: int) -> None:
        super().__init__(f"a recipient with this ref exists: {recipient_id}")
        self.recipient_id = recipient_id


def check_timezone(tz: str) -> str:
    try:
        ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise RecipientError("timezone", f"unknown timezone {tz!r} (use an IANA name such as Asia/Kolkata)") \
            from None
    if tz not in available_timezones() and tz != "UTC":
        raise RecipientError("timezone", f"unknown timezone {tz!r} (use an IANA name such as Asia/Kolkata)")
    return tz


def check_channels(channels: list[str]) -> list[str]:
    unknown = sorted(set(channels) - set(PEOPLE_CHANNELS))
    if unknown:
        raise RecipientError("opted_out_channels", f"unknown channel(s) {unknown}; channels are "
                                                   f"{', '.join(PEOPLE_CHANNELS)}")
    return sorted(set(channels))


def check_quiet_hours(start: time | None, end: time | None) -> None:
    if (start is None) != (end is None):
        raise RecipientError("quiet_hours", "give both start and end, or neither")


def _row(r: Any) -> dict[str, Any]:
    d = dict(r._mapping)
    d["recipient_id"] = d["id"]
    d["opted_out_channels"] = list(d["opted_out_channels"] or [])
    for k in ("quiet_start", "quiet_end"):
        d[k] = d[k].strftime("%H:%M") if d[k] is not None else None
    return d


def create(tenant_id: int, values: dict[str, Any], actor_ref: str,
           engine: Engine | None = None) -> dict[str, Any]:
    check_timezone(values.get("timezone") or "UTC")
    check_quiet_hours(values.get("quiet_start"), values.get("quiet_end"))
    values = {**values, "opted_out_channels": check_channels(values.get("opted_out_channels") or [])}
    with UnitOfWork(engine) as uow:
        row = uow.execute(sql.INSERT_RECIPIENT, {"t": tenant_id, "email": None, "phone": None, "timezone": "UTC",
                                                 "quiet_start": None, "quiet_end": None, "daily_cap": None,
                                                 **values}).first()
        if row is None:
            prior = uow.execute(sql.RECIPIENT_ID_BY_REF, {"t": tenant_id, "r": values["ref"]}).scalar_one()
            raise DuplicateRecipient(int(prior))
        uow.execute(sql.INSERT_RECIPIENT_CHANGE, {"t": tenant_id, "r": row.id, "a": actor_ref, "f": "created",
                                                  "o": None, "n": values["ref"]})
        uow.commit()
    return _row(row)


def get(tenant_id: int, recipient_id: int, engine: Engine | None = None) -> dict[str, Any] | None:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sql.GET_RECIPIENT, {"t": tenant_id, "i": recipient_id}).first()
        if r is None:
            return None
        out = _row(r)
        out["changes"] = [dict(c._mapping) for c in uow.execute(sql.RECIPIENT_CHANGES, {"i": recipient_id})]
    return out


def find_by_ref(tenant_id: int | None, ref: str, engine: Engine | None = None) -> list[tuple[int, int]]:
    """(tenant_id, recipient_id) of every recipient with this ref (all tenants for on-call tooling)."""
    with UnitOfWork(engine) as uow:
        return [(int(r.tenant_id), int(r.id)) for r in uow.execute(sql.FIND_BY_REF, {"r": ref, "t": tenant_id})]


def list_recipients(tenant_id: int, query: str = "", limit: int = 50, before: int | None = None,
                    after: int | None = None, engine: Engine | None = None) -> list[dict[str, Any]]:
    """Newest first, a keyset page (`before`/`after` a recipient id); `query` matches part of the ref or name."""
    like = "%" + like_escape(query) + "%"
    with UnitOfWork(engine) as uow:
        return [_row(r) for r in uow.execute(sql.LIST_RECIPIENTS, {"t": tenant_id, "b": before, "a": after,
                                                                   "q": like, "l": limit})]


@dataclass(frozen=True)
class Change:
    field: str
    old: str | None
    new: str | None


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, time):
        return v.strftime("%H:%M")
    if isinstance(v, list | tuple):
        return ",".join(v)
    return str(v)


def update(tenant_id: int, recipient_id: int, values: dict[str, Any], actor_ref: str,
           engine: Engine | None = None) -> dict[str, Any] | None:
    """Apply the given fields; record one change row per field that actually changed. None: not found."""
    unknown = set(values) - set(EDITABLE)
    if unknown:
        raise RecipientError(sorted(unknown)[0], "not an editable field")
    if "timezone" in values:
        check_timezone(values["timezone"])
    if "opted_out_channels" in values:
        values = {**values, "opted_out_channels": check_channels(values["opted_out_channels"] or [])}
    with UnitOfWork(engine) as uow:
        cur = uow.execute(sql.LOCK_RECIPIENT, {"t": tenant_id, "i": recipient_id}).first()
        if cur is None:
            return None
        current = dict(cur._mapping)
        merged = {**current, **values}
        check_quiet_hours(merged["quiet_start"], merged["quiet_end"])
        changes = [Change(k, _text(current[k]), _text(v)) for k, v in values.items()
                   if _text(current[k]) != _text(v)]
        if changes:
            uow.execute(sql.update_recipient(c.field for c in changes),
                        {"i": recipient_id, **{c.field: values[c.field] for c in changes}})
            actions.record(uow, tenant_id=tenant_id, actor_ref=actor_ref, action="preference change",
                           target=f"recipient {current['ref']}",
                           note="; ".join(f"{c.field}: {c.old or '—'} → {c.new or '—'}" for c in changes))
            for c in changes:
                uow.execute(sql.INSERT_RECIPIENT_CHANGE,
                            {"t": tenant_id, "r": recipient_id, "a": actor_ref, "f": c.field, "o": c.old, "n": c.new})
        uow.commit()
    return get(tenant_id, recipient_id, engine)
