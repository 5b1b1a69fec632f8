"""The page registry: adding a page is adding a module that exports `PAGE`, and listing it here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import reflex as rx


@dataclass(frozen=True)
class Page:
    route: str
    component: Callable[[], rx.Component]
    title: str
    on_load: list[Any] = field(default_factory=list)
    nav: tuple[str, str] | None = None  # (label, lucide icon) when it belongs in the navigation


def all_pages() -> list[Page]:
    from dashboard.pages import (
        api_keys,
        audit,
        balance,
        campaign_detail,
        campaigns,
        endpoints,
        journey_detail,
        journeys,
        ledger,
        login,
        message_detail,
        ops,
        order_detail_view,
        orders,
        recipient_detail,
        recipients,
        search,
    )

    return [login.PAGE, order_detail_view.PAGE, orders.PAGE, ledger.PAGE, recipients.PAGE, recipient_detail.PAGE,
            audit.PAGE, journeys.PAGE, campaigns.PAGE, balance.PAGE, api_keys.PAGE, endpoints.PAGE, ops.PAGE,
            search.PAGE, message_detail.PAGE, campaign_detail.PAGE, journey_detail.PAGE]
