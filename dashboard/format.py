"""Turn query rows into the flat string dicts the tables render. Pure."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from domain.rules import REASON_TEXT


def money(cents: int | None, currency: str = "EUR") -> str:
    return f"{(cents or 0) / 100:,.2f} {currency}"


def when(ts: datetime | None) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if ts else "—"


def age(ts: datetime | None, now: datetime | None = None) -> str:
    if ts is None:
        return "—"
    s = ((now or datetime.now(UTC)) - ts).total_seconds()
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.1f}h"


def notification(n: dict[str, Any]) -> dict[str, str]:
    reason = ""
    if n.get("status") == "SUPPRESSED":
        reason = REASON_TEXT.get(n.get("suppressed_reason") or "", n.get("suppressed_reason") or "")
    elif n.get("review") == "needs_review":
        reason = f"Needs review: {n.get('last_error_class') or 'permanent failure'}"
    elif n.get("last_error_class"):
        reason = f"Last error: {n['last_error_class']}"
    return {
        "id": str(n["id"]),
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
        "receiver_calls": str(n.get("receiver_calls") or 0),
        "cost": money(n.get("cost_cents")),
        "created": when(n.get("created_at")),
        "sent": when(n.get("sent_at")),
        "reason": reason,
        "revision": str(n.get("aggregate_revision") or ""),
    }
