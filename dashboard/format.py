"""Turn query rows into the flat string dicts the tables render. Pure."""

from __future__ import annotations

import math
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


def search_text(raw: object, limit: int) -> str:
    """A search term from the browser (a URL parameter or a form field): at most `limit` characters, printable ones
    only — a NUL or a lone surrogate would be refused by PostgreSQL or its driver, and a crash is no answer. Pure."""
    return "".join(ch for ch in str(raw)[:limit] if ch.isprintable())


def money(cents: int | None, currency: str = "EUR") -> str:
    return f"{(cents or 0) / 100:,.2f} {currency}"


_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
         "seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def _words(n: int) -> str:
    """0 ≤ n < 10**12 in English words, as a cheque writes them ("two hundred fifty")."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS[n // 10] + ("-" + _ONES[n % 10] if n % 10 else "")
    if n < 1000:
        return _ONES[n // 100] + " hundred" + (" " + _words(n % 100) if n % 100 else "")
    for size, name in ((10**9, "billion"), (10**6, "million"), (10**3, "thousand")):
        if n >= size:
            return _words(n // size) + " " + name + (" " + _words(n % size) if n % size else "")
    raise AssertionError(n)  # unreachable: every n >= 1000 meets a size


def amount_in_words(cents: int, currency: str = "EUR") -> str:
    """An amount spelt out, to read back before money moves: 25000 → "two hundred fifty euros and no cents";
    a slipped digit (2500.00 for 250.00) reads as a different sentence."""
    if not 0 <= cents < 10**14:
        raise ValueError("amount out of range")
    unit = {"EUR": ("euro", "euros")}.get(currency, (currency, currency))
    whole, part = divmod(cents, 100)
    return (f"{_words(whole)} {unit[0] if whole == 1 else unit[1]} and "
            + ("no cents" if part == 0 else f"{_words(part)} cent{'s' if part != 1 else ''}"))


def when(ts: datetime | None) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if ts else "—"


def change_line(change: dict[str, Any] | None) -> str:
    """Who made an order's latest change, what and when: "approved by alice at 07:46:29" (UTC). Empty when the order
    is still at the revision it entered the system with."""
    if not change:
        return ""
    what = str(change["event_type"]).removeprefix("order.")
    who = str(change["actor_ref"]).removeprefix("operator:")
    return f"{what} by {who} at {change['occurred_at'].astimezone(UTC):%H:%M:%S}"


def cost_text(n: dict[str, Any]) -> str:
    """What a message cost the balance, only where it was charged. With the ledger's money columns: the charge of a
    SENT/DELIVERED row, "reserved" while QUEUED, "refunded" after a reserve given back; without them (other lists):
    the price of a sent row. A row that was never charged (suppressed before any reserve) shows "—"."""
    status, held = n["status"], n.get("reserved_cents")
    if status in ("SENT", "DELIVERED"):
        return money(n.get("cost_cents") if held is None else held)
    if status == "QUEUED" and held:
        return f"{money(held)} reserved"
    if n.get("refunded_cents"):
        return f"refunded {money(n['refunded_cents'])}"
    return "—"


def done_line(what: str, a: dict[str, Any] | None) -> str:
    """One audit row in words, for the page of the thing it acted on: "Cancelled by alice at 2026-12-01 19:02:11
    UTC: customer asked" ("" when there is none)."""
    if not a:
        return ""
    who = str(a["actor_ref"]).split(":", 1)[-1] if str(a["actor_ref"]).startswith("operator:") else str(a["actor_ref"])
    return f"{what} by {who} at {when(a['at'])} UTC: {a.get('note') or '(no note)'}"


def resolved_line(by: dict[str, Any] | None) -> str:
    """A FAILED message a human resolved, in words: who, when, why ("" when it was not resolved)."""
    if by is None:
        return ""
    if not by.get("actor_ref"):
        return "Resolved by hand (nothing is sent; it has left the review list)."
    who = str(by["actor_ref"]).split(":", 1)[-1]
    return f"Resolved by hand by {who} at {when(by['at'])} UTC: {by.get('note') or '(no note)'} — nothing is sent."


def rate_text(done: int, attempted: int) -> str:
    """A delivery rate with what it is over: "98% of 64 attempted", or "—" when nothing was attempted. Never 100 %
    while anything failed, never 0 % while anything was delivered: near either end it shows one decimal, rounded
    away from the end ("99.6% of 283 attempted" with one failure, where whole percents read 100 %)."""
    if not attempted:
        return "—"
    pct = 100 * done / attempted
    if done in (0, attempted) or 0.5 <= pct < 99.5:
        shown = f"{pct:.0f}"
    elif pct >= 99.5:
        shown = f"{math.floor(pct * 10) / 10:.1f}"
    else:
        shown = f"{math.ceil(pct * 10) / 10:.1f}"
    return f"{shown}% of {attempted:,} attempted"


AMBER_SHARE = 0.8  # a lane whose oldest due work passed this share of the SLO is about to breach it


def ops_banner(lanes: list[dict[str, Any]], slo_seconds: float, review: int) -> tuple[str, str]:
    """The ops page's one-line verdict, (level, text): red when a lane's oldest due work is over the SLO; amber before
    a breach (over AMBER_SHARE of it), when a lane is paused, or when rows wait for a human; green otherwise."""
    over = [x["lane"] for x in lanes if x["oldest_owed_seconds"] > slo_seconds]
    paused = [x["lane"] for x in lanes if x["paused"]]
    if over:
        return "red", (f"SLO breached on {', '.join(over)}: due work older than {slo_seconds:.0f}s"
                       + (f"; paused: {', '.join(paused)}." if paused else "."))
    near = [x["lane"] for x in lanes if x["oldest_owed_seconds"] > AMBER_SHARE * slo_seconds]
    why = ([f"close to the SLO on {', '.join(near)}"] if near else []) + \
          ([f"paused: {', '.join(paused)}"] if paused else []) + ([f"{review} waiting for a human"] if review else [])
    if why:
        return "amber", "Attention — " + "; ".join(why) + "."
    return "green", f"All lanes within the {slo_seconds:.0f}s SLO."


def round_ticks(top: float, at_most: int = 5) -> list[int]:
    """A chart axis from 0 to at least `top`, in 1 to `at_most` evenly spaced round steps (1, 2 or 5 times a power
    of ten: 0/20/40/60, never 0/5/10/20), whole numbers (a step is never below 1). Pure."""
    top = max(float(top), 1.0) if math.isfinite(top) else 1.0
    power = 10.0 ** math.floor(math.log10(top / at_most))
    step = max(1, round(next(m * power for m in (1, 2, 5, 10) if top / (m * power) <= at_most)))
    return [i * step for i in range(math.ceil(top / step - 1e-9) + 1)]


def ago(seconds: float) -> str:
    return f"updated {max(0, int(seconds))} s ago"


RECEIVER_SAID = {"sent": "accepted", "already_processed": "already processed", "retry": "try again",
                 "failed": "refused"}


def notification(n: dict[str, Any]) -> dict[str, str]:
    # An owed row says what holds it now (domain/delivery/state.py), instead of the detail of an earlier deferral.
    reason = n["state"]["text"] if n.get("state") else ledger_reason(n)
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
        "resolved": "resolved by hand" if n.get("review") == "resolved" else "",
        "effect": n.get("effect_ref") or n.get("provider_reference") or "—",
        # What the receiver answered last, as the worker recorded it ("already processed" after a redelivery).
        "receiver_said": RECEIVER_SAID.get(n.get("last_outcome") or "", "—"),
        "cost": cost_text(n),
        "created": when(n.get("created_at")),
        "sent": when(n.get("sent_at")),
        "reason": reason,
        "revision": str(n.get("aggregate_revision") or ""),
    }
