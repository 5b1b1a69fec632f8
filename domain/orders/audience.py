"""Audience is code, not template: who hears about which event, on which channel and lane. Pure and tested."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Message:
    channel: str
    lane: str
    recipient: str
    template: str


def order_event_audience(event_type: str, customer_ref: str, tenant_id: int) -> list[Message]:
    """order.approved: the customer's webhook (high) and an email to the customer (normal).

    order.cancelled / order.fulfilled: the webhook only (high); the customer hears from support or the carrier.
    """
    webhook = Message("webhook", "high", f"webhook:tenant-{tenant_id}", event_type)
    if event_type == "order.approved":
        return [webhook, Message("email", "normal", customer_ref, "order_update")]
    if event_type in ("order.cancelled", "order.fulfilled"):
        return [webhook]
    return []
