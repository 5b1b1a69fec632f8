"""Invariant (pure): the database URL may name a primary and its standby (SQLAlchemy's `?host=h1:p1&host=h2:p2`
with `target_session_attrs=read-write`), and every connection we open without SQLAlchemy (the workers' hot pool, the
relay's LISTEN) gets the same hosts and attributes in libpq's form, so no process stays on a demoted or dead primary;
a one-host URL is only stripped of its driver; the receiver's database name goes before the query, not after it."""

from domain.db import libpq_url
from jobs.ops.procs import receiver_database_url

MULTI = ("postgresql+psycopg://postgres@/outbox?host=127.0.0.1:55446&host=127.0.0.1:55456"
         "&target_session_attrs=read-write")


def test_one_host_url_loses_only_its_driver() -> None:
    assert libpq_url("postgresql+psycopg://postgres@127.0.0.1:5432/outbox") == "postgresql://postgres@127.0.0.1:5432/outbox"


def test_both_hosts_and_the_session_attribute_reach_libpq() -> None:
    assert libpq_url(MULTI) == ("postgresql://postgres@127.0.0.1:55446,127.0.0.1:55456/outbox"
                                "?target_session_attrs=read-write")


def test_credentials_stay_quoted() -> None:
    assert libpq_url("postgresql+psycopg://u%40x:p%2Fw@/db?host=a:1&host=b:2") == "postgresql://u%40x:p%2Fw@a:1,b:2/db"


def test_receiver_database_is_named_before_the_query() -> None:
    assert receiver_database_url(MULTI) == MULTI.replace("/outbox?", "/outbox_receiver?")
    assert receiver_database_url("postgresql+psycopg://p@h:1/outbox") == "postgresql+psycopg://p@h:1/outbox_receiver"
