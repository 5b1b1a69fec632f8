"""Turn query rows into the flat string dicts the tables render. Pure."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from domain.ledger.reasons import ledger_reason

MAX_ID = 2**31 - 1


def parse_id(raw: object) -> int | None:
    """A row id from the browser: ASCII digits within PostgreSQL's integer, else None ("²" is a digit to Python's
    `isdigit`, and 10**20 overflows the column — both must be a clean "not found", never a crash)."""
    text = str(raw)
    if not (0 < len(text) <= 10 and text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if 0 < value <= MAX_ID else None


def money(cents: int | None, currency: str = "EUR") -> str:
    return f"{(cents or 0) / 100:,.2f} {currency}"


def when(ts: datetime | None) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if ts else "—"


RECEIVER_SAID = {"sent": "accepted", "already_processed": "already processed", "retry": "try again",
                 "failed": "refused"}


def notification(n: dict[str, Any]) -> dict[str, str]:
    reason = ledger_reason(n)
    return {
        "id": str(n["id"]),
        "tenant": str(n.get("tenant_id") or ""),
        "event_id": str(n.get("event_id") or ""),
        "event_short": str(n.get("event_id") or "")[:8],
        "job_id": n.get("job_id") or "",
        "channel": n["channel"],
        "lane": n["lane"],
        "recipient": n["recipient"],
        "template": n["template"],
        "status": n["status"],
        "display_status": "available" if n["status"] == "QUEUED" and not n.get("attempts") else
        ("retrying" if n["status"] == "QUEUED" else "completed" if n["status"] in ("SENT", "DELIVERED")
         else n["status"].lower()),
        "attempts": str(n.get("attempts") or 0),
        "effect": n.get("effect_ref") or n.get("provider_reference") or "—",
        # What the receiver answered last, as the worker recorded it ("already processed" after a redelivery).
        "receiver_said": RECEIVER_SAID.get(n.get("last_outcome") or "", "—"),
        "cost": money(n.get("cost_cents")),
        "created": when(n.get("created_at")),
        "sent": when(n.get("sent_at")),
        "reason": reason,
        "revision": str(n.get("aggregate_revision") or ""),
    }
