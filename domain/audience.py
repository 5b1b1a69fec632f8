"""Audience is code, not template: who hears about which event, on which channel and lane. Pure and tested."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# Default price per message per channel, seeded into each tenant's `channel_prices` (the table is what is charged).
DEFAULT_PRICE_CENTS: Final[dict[str, int]] = {"webhook": 0, "email": 1, "whatsapp": 3, "sms": 5}
CHANNELS: Final[tuple[str, ...]] = tuple(DEFAULT_PRICE_CENTS)
PEOPLE_CHANNELS: Final[tuple[str, ...]] = ("email", "sms", "whatsapp")


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


def dedupe_key(tenant_id: int, channel: str, recipient: str, template: str, subject: str) -> str:
    """Deterministic: recipient + template + the subject/period the message is about."""
    return f"t{tenant_id}:{channel}:{recipient}:{template}:{subject}"
