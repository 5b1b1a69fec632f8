"""A second service: a fulfilment projection of orders, fed by the outbox's CDC stream through an inbox.

Another team's system, standing alone like the receiver: its own settings (`FULFILMENT_*`), database and
migrations; it imports nothing of ours and knows the stream only by its message fields (docs/relays.md)."""
