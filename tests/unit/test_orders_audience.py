"""Invariant (pure): who hears about which order event is code, and an approval reaches the customer's webhook on
the high lane and their email on the normal lane."""

from domain.orders.audience import order_event_audience


def test_approved_order_audience_is_webhook_high_and_email_normal():
    msgs = order_event_audience("order.approved", "cust-001", 42)
    assert [(m.channel, m.lane) for m in msgs] == [("webhook", "high"), ("email", "normal")]
