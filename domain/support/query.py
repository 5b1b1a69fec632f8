"""What a support query might be — pure: a string in, the probes to run out (or a refusal naming why).

One box takes a recipient ref, a name, a phone, an email, a message id (`4940`, `#4940`), a job id (`n-4940`), a
provider reference, an event id or an order number (`913`, `#913`: how the orders list writes one). The string is
never stored or logged; a contact point is compared with what `recipients` already holds and goes no further. The
one parser of every door that finds by what the pages print: search, /audit and `outbox why`.
"""

from __future__ import annotations

import re
import unicodedata
import uuid
from dataclasses import dataclass
from typing import Final

MAX_QUERY_CHARS: Final[int] = 200
MAX_ID: Final[int] = 2**31 - 1
# What the API publishes for `q`: no control character, and something besides white space (U+FEFF named: regex
# flavours disagree on whether `\s` covers it). `read_query` enforces the same.
QUERY_PATTERN: Final = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f\ufeff][^\x00-\x1f\x7f-\x9f]*$"

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+$")
_PHONE = re.compile(r"^\+?[0-9][0-9 ().-]{5,24}$")
_MESSAGE = re.compile(r"^#([0-9]{1,10})$")
_JOB = re.compile(r"^n-([0-9]{1,10})$", re.IGNORECASE)
_TOKEN = re.compile(r"^[A-Za-z0-9._:@+-]{1,200}$")  # refs, provider references


class QueryRefused(ValueError):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class Probes:
    """Every reading of one query; a field left empty is a reading it cannot have."""

    text: str = ""  # the trimmed query: a recipient ref or a provider reference, compared exactly
    name: str = ""  # a display name fragment (ILIKE, escaped)
    message_id: int | None = None
    order_id: int | None = None
    event_id: uuid.UUID | None = None
    email: str = ""  # lower-cased
    phone_digits: str = ""  # digits only: "+91 98000 00001" and "919800000001" are one number

    @property
    def kinds(self) -> list[str]:
        """What the query was read as, for the answer (never the value itself)."""
        named = {"message id": self.message_id, "order number": self.order_id, "event id": self.event_id,
                 "email": self.email, "phone": self.phone_digits, "name": self.name,
                 "recipient ref or provider reference": self.text}
        return [k for k, v in named.items() if v]


def _digits(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and 0 < int(text) <= MAX_ID else None


def read_query(raw: str) -> Probes:
    """The probes for one query, or `QueryRefused` (empty, too long, control characters) — a refused query runs
    nothing."""
    if len(raw) > MAX_QUERY_CHARS:
        raise QueryRefused("query_too_long", f"a search is at most {MAX_QUERY_CHARS} characters")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in raw):
        raise QueryRefused("invalid_query", "a search cannot hold control characters (such as NUL)")
    q = raw.strip()
    if not q or q == "\ufeff" * len(q):
        raise QueryRefused("empty_query", "type a ref, name, phone, email, message id, job id, provider "
                                          "reference, event id or order number")
    if m := _MESSAGE.match(q):
        # `#932` is how the pages print a message id AND an order number (the orders list): both are offered.
        number = _digits(m.group(1))
        return Probes(message_id=number, order_id=number)
    if m := _JOB.match(q):
        return Probes(message_id=_digits(m.group(1)))
    try:
        return Probes(event_id=uuid.UUID(q))
    except ValueError:
        pass
    if _EMAIL.match(q):
        return Probes(email=q.lower(), text=q if _TOKEN.match(q) else "")
    number = _digits(q)
    phone = "".join(ch for ch in q if ch.isdigit()) if _PHONE.match(q) else ""
    if number is not None:
        # A bare number is a message id or an order number (and a long one may be a phone).
        return Probes(message_id=number, order_id=number, phone_digits=phone if len(phone) >= 6 else "", text=q)
    if phone and len(phone) >= 6:
        return Probes(phone_digits=phone)
    return Probes(text=q if _TOKEN.match(q) else "", name=q if len(q) >= 2 else "")


def names_contact_point(raw: str) -> bool:
    """Whether a query reads as a phone or an email: such a query is kept out of URLs and browser history. Pure."""
    try:
        p = read_query(raw)
    except QueryRefused:
        return False
    return bool(p.email or p.phone_digits)
