"""Bulk review (domain/delivery/review.py): the rows chosen, or every failed row of a lane since a time — replayed
or resolved in one commit, each change kept with who and why.

Invariants: a bulk replay queues exactly the FAILED rows it names (same row, same event id, a new fence token)
and records one operator action per row with the actor and the note; a second replay of the same rows changes
nothing and records nothing; another tenant's ids are exactly no rows; "lane X since T" takes only that lane's
unresolved failures at or after T; resolve leaves the row FAILED and out of review; every invariant holds after.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import sqlalchemy as sa

from domain.db import get_engine
from domain.delivery import review
from tests.support.db import assert_invariants
from tests.support.long_way import row
from tests.support.people import person
from tests.support.review import actions, failed


def test_bulk_replay_queues_the_chosen_rows_once_and_keeps_who_and_why(db):
    """Invariant: the chosen FAILED rows are QUEUED again with their event id and a new token, one action each
    (actor, note); replaying them again, or another tenant replaying them, changes nothing."""
    rid, _ = person(cap=None)
    ids = [failed(rid) for _ in range(3)]
    before = {i: row(i) for i in ids}
    assert review.review_many("replay", 7, ids, actor_ref="operator:carol", note="not yours").done == ()
    assert all(row(i).status == "FAILED" for i in ids), "another tenant's ids are no rows"
    done = review.review_many("replay", 42, [*ids, ids[0], 999_999_999], actor_ref="operator:alice",
                              note="receiver fixed")
    assert done.done == tuple(sorted(ids))
    for i in ids:
        r = row(i)
        assert (r.status, r.event_id, r.claim_token) == ("QUEUED", before[i].event_id, before[i].claim_token + 1)
    assert actions(ids, "replay") == [("operator:alice", f"notification {i}", "receiver fixed") for i in sorted(ids)]
    again = review.review_many("replay", 42, ids, actor_ref="operator:alice", note="twice")
    assert again.done == () and [row(i).claim_token for i in ids] == [before[i].claim_token + 1 for i in ids]
    assert len(actions(ids, "replay")) == 3, "a replay that changed nothing is not recorded"
    assert_invariants()


def test_lane_since_takes_only_that_lanes_unresolved_failures_after_t(db):
    """Invariant: "every failed row on lane X since T" replays exactly the lane's FAILED rows settled at or after
    T that no one resolved — not another lane's, not an older one, not a resolved one."""
    rid, _ = person(cap=None)
    old, fresh, resolved = failed(rid, "normal"), failed(rid, "normal"), failed(rid, "normal")
    other_lane = failed(rid, "high")
    with get_engine().begin() as c:
        c.execute(sa.text("UPDATE notifications SET settled_at = now() - interval '2 hours' WHERE id = :i"),
                  {"i": old})
    assert review.review_many("resolve", 42, [resolved], actor_ref="operator:bob", note="called them").done \
        == (resolved,)
    assert (row(resolved).status, row(resolved).review) == ("FAILED", "resolved")
    since = datetime.now(UTC) - timedelta(hours=1)
    assert review.count_lane(42, "normal", since) == 1
    done = review.review_lane("replay", 42, "normal", since, actor_ref="cli:ops", note="provider back")
    assert (done.done, done.left) == ((fresh,), 0)
    assert [row(i).status for i in (old, fresh, resolved, other_lane)] == ["FAILED", "QUEUED", "FAILED", "FAILED"]
    assert review.review_lane("replay", 42, "normal", since, actor_ref="cli:ops", note="again").done == ()
    assert review.review_many("resolve", 42, [resolved], actor_ref="operator:bob", note="again").done == (), \
        "resolving a resolved row changes nothing"
    assert_invariants()


def test_a_resolved_message_says_so_with_who_when_and_why_on_its_page_and_in_the_ledger(db):
    """Issue 27, item 5: a FAILED message a human resolved still read plain FAILED on its page and in the ledger
    (only the CLI said "resolved"). Its page now carries who resolved it, when and the note (from the audit log),
    and its ledger row is marked resolved by hand; an unresolved FAILED row is marked neither way."""
    from dashboard.format import notification, resolved_line
    from domain.ledger.views import LedgerFilter, ledger_rows
    from domain.support.message import message_page

    rid, _ = person()
    done, other = failed(rid), failed(rid)
    assert review.resolve(42, done, actor_ref="operator:pat", note="customer called, sent by hand")
    page = message_page(42, done, datetime.now(UTC))
    assert page is not None and page["status"] == "FAILED"
    by = page["resolved_by"]
    assert by["actor_ref"] == "operator:pat" and by["note"] == "customer called, sent by hand"
    line = resolved_line(by)
    assert line.startswith("Resolved by hand by pat at ") and "customer called, sent by hand" in line
    untouched = message_page(42, other, datetime.now(UTC))
    assert untouched is not None and untouched["resolved_by"] is None and resolved_line(None) == ""
    rows, _ = ledger_rows(42, LedgerFilter(status="FAILED", limit=200), money=True)
    listed = {int(n["id"]): notification(n) for n in rows if int(n["id"]) in (done, other)}
    assert listed[done]["resolved"] == "resolved by hand" and listed[other]["resolved"] == ""
    assert_invariants()
