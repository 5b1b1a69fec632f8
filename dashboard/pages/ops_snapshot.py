"""What the ops page reads, in the words it shows: one snapshot of a tenant's lanes (or every tenant's), failures to
review, recent privileged actions, the charts' points and their round ticks over the chosen window, the verdict
banner, the push figures, and platform on-call's CDC stream card. Reads only; the state (`ops_state.OpsState`)
assigns what these return.
"""

from __future__ import annotations

import asyncio
from typing import Any

from dashboard.components import action_row
from dashboard.format import notification, ops_banner, round_ticks, when
from domain.access import actions as operator_actions
from domain.cdc import views as cdc_views
from domain.delivery import views as delivery_views
from domain.settings import get_settings


async def snapshot(tenant_id: int | None, window: str) -> dict[str, Any]:
    """One tenant's view, or every tenant's (tenant_id None: platform on-call)."""
    s = get_settings()
    stats, review, series, refresh, done = await asyncio.gather(
        asyncio.to_thread(delivery_views.lane_stats, tenant_id),
        asyncio.to_thread(delivery_views.review_items, tenant_id),
        asyncio.to_thread(delivery_views.ops_series, tenant_id, window),
        asyncio.to_thread(delivery_views.refresh_stats, tenant_id),
        asyncio.to_thread(operator_actions.recent, tenant_id, 20))
    # The CDC stream carries every tenant's events: its card is platform on-call's, and only with OUTBOX_CDC on.
    cdc = await asyncio.to_thread(cdc_card) if s.cdc and tenant_id is None else {"cdc_on": False}
    level, banner = ops_banner(stats, s.oldest_owed_slo_seconds, len(review))
    return {
        "banner_level": level, "banner": banner,
        "slo": f"{s.oldest_owed_slo_seconds:.0f}s",
        "bulk_rate": f"{s.bulk_rate_per_second:.0f}/s per channel",
        "dev_mode": bool(s.dev_mode),
        "lanes": [{
            "lane": x["lane"], "depth": str(x["depth"]), "oldest": f"{x['oldest_owed_seconds']:.1f}s",
            "breach": "yes" if x["oldest_owed_seconds"] > s.oldest_owed_slo_seconds else "no",
            "scheduled": str(x["scheduled"]),
            "next_due": when(x["next_due"]) if x["next_due"] else "—",
            "attempts": str(x["attempts"]), "failed": str(x["failed"]), "review": str(x["review"]),
            "p50": f"{x['p50_ms']:.0f} ms", "p99": f"{x['p99_ms']:.0f} ms",
            "paused": "yes" if x["paused"] else "no",
        } for x in stats],
        "review": [notification(n) for n in review],
        "actions": [action_row(a) for a in done],
        **_charts(series, s.oldest_owed_slo_seconds),
        "pushes": str(refresh["pushes"]),
        "push_p50": f"{refresh['p50_ms']:.0f} ms" if refresh["pushes"] else "—",
        "push_p99": f"{refresh['p99_ms']:.0f} ms" if refresh["pushes"] else "—",
        **cdc,
    }


def cdc_card() -> dict[str, Any]:
    """/ops' "CDC stream" card in words: what the fulfilment group owes (never delivered or delivered and not
    acknowledged), the oldest of it, and the WAL the slot makes PostgreSQL keep. Reads only."""
    import redis as redis_lib

    s = get_settings()
    r = redis_lib.Redis.from_url(s.redis_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        c = cdc_views.stream_card(r, s.cdc_slot, s.cdc_stream)
    except redis_lib.RedisError as e:
        return {"cdc_on": True,
                "cdc_state": f"Redis does not answer ({type(e).__name__}): the stream's lag is unknown.",
                **{f"cdc_{k}": "—" for k in ("behind", "pending", "oldest", "retained")}}
    finally:
        r.close()
    state = ("Nothing owed: the projection has every event in the stream." if c.group_exists and not c.events_behind
             else "The fulfilment group does not exist yet (the service has never read the stream)."
             if not c.group_exists else f"The projection is {c.events_behind} event(s) behind.")
    return {
        "cdc_on": True, "cdc_state": state, "cdc_behind": str(c.events_behind), "cdc_pending": str(c.pending),
        "cdc_oldest": "—" if c.oldest_unconsumed_age_s is None else f"{c.oldest_unconsumed_age_s:.1f} s",
        "cdc_retained": f"{c.slot_retained_bytes / 2**20:.1f} MB" if c.slot_exists else "no slot",
    }


def _charts(series: list[dict[str, Any]], slo: float) -> dict[str, Any]:
    """The charts' points (each the worst of its span; seconds for every age and latency, the SLO beside them as a
    line of its own) and each chart's round y-axis ticks, from 0 to above its highest value and the SLO."""
    points = [{"minute": r["minute"], "depth": int(r["depth"]), "oldest": round(float(r["oldest_seconds"]), 1),
               "sent": int(r["sent"]), "latency_max": round(float(r["latency_max_seconds"]), 1),
               "latency_mean": round(float(r["latency_mean_seconds"]), 1), "slo": slo} for r in series]

    def top(*keys: str) -> float:
        return max((float(p[k]) for p in points for k in keys), default=0.0)

    ticks = {"depth": round_ticks(top("depth")), "sent": round_ticks(top("sent")),
             "oldest": round_ticks(top("oldest", "slo")),
             "latency": round_ticks(top("latency_max", "latency_mean", "slo"))}
    return {"series": points, "slo_label": f"SLO {slo:.0f} s", **{f"ticks_{k}": v for k, v in ticks.items()},
            **{f"top_{k}": v[-1] for k, v in ticks.items()}}
