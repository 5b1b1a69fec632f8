"""Invariant (pure): the ledger's dedupe key is deterministic and tells every part of a message apart."""

from domain.ledger.write import dedupe_key


def test_dedupe_key_is_a_pure_function_of_its_parts_and_tells_every_part_apart():
    """The same message always maps to the same key (so a retry is skipped); changing any part is a new key."""
    parts = (42, "email", "cust-001", "order_approved_email", "order-1-r2")
    assert dedupe_key(*parts) == "t42:email:cust-001:order_approved_email:order-1-r2"
    variants = [(7, *parts[1:]), (42, "sms", *parts[2:]), (*parts[:2], "cust-002", *parts[3:]),
                (*parts[:3], "offer", parts[4]), (*parts[:4], "order-1-r3")]
    assert len({dedupe_key(*v) for v in variants} | {dedupe_key(*parts)}) == len(variants) + 1
