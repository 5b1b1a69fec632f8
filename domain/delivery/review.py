"""Review: replay a FAILED row (same row, dedupe key and event id) or mark it resolved — one row, the rows chosen,
or every failed row of a lane since a time.

A one-time code past its end of life is never owed again: a replay leaves it as it is and says why (`Refused`,
reason `code_expired`: "the code had expired at 10:42 UTC"); the person asks for a new code. It may still be
resolved."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine

from domain.access import actions
from domain.db import UnitOfWork
from domain.delivery import sql_review
from domain.delivery.queue import NOTIFY_OWED
from domain.ledger import reasons
from domain.settings import get_settings


@dataclass(frozen=True)
class Refused:
    """A FAILED row a replay left as it is for a reason of its own: `reason` is the ledger's word (`code_expired`),
    `detail` its plain words ("the code had expired at 10:42 UTC")."""

    id: int
    reason: str
    detail: str


@dataclass(frozen=True)
class Replayed:
    """One replay's answer, truthy when the row is owed again. Not done: `refused` says why when the row is FAILED
    but may not be owed again; None when it is no longer FAILED (or not this tenant's, or no such row)."""

    done: bool
    refused: Refused | None = None

    def __bool__(self) -> bool:
        return self.done


def left_as_it_is(refused: tuple[Refused, ...]) -> str:
    """The refused rows in plain words, for every door's answer: "#17 (the code had expired at 10:42 UTC)"."""
    return ", ".join(f"#{r.id} ({r.detail})" for r in refused)


def _refused(uow: UnitOfWork, statement: Any, params: dict[str, Any]) -> tuple[Refused, ...]:
    """The rows a replay's guard left out because each is a one-time code past its end of life."""
    return tuple(Refused(int(r.id), "code_expired", reasons.code_expired(r.expires_at))
                 for r in uow.execute(statement, params))


def replay(tenant_id: int | None, notification_id: int, engine: Engine | None = None, *,
           actor_ref: str = "system", note: str = "") -> Replayed:
    """FAILED -> QUEUED with the same row, dedupe key and event id: the receiver recognises it. The row gets the
    configured number of attempts again, no more; money was refunded when it failed, so it is reserved once.

    A message the provider accepted and then could not deliver (a `failed` receipt: `undeliverable`) is a new
    message for the provider: it gets its own idempotency key (`provider_key`) and forgets the old reference, so
    the provider sends it again instead of answering `already_processed` (which would charge and send nothing),
    and a late receipt for the old send never lands on the new one. Any other failure keeps its key: if the
    provider did accept it after all, it answers `already_processed` and that is the truth.

    A one-time code past its end of life is refused (`Replayed.refused`, `code_expired`): nothing changes, nothing
    is audited.

    A replay waits while a month is being archived (retention/archive.py): it lands before the archive's owed
    check (the archive refuses) or after its commit, never in between."""
    refused: Refused | None = None
    with UnitOfWork(engine) as uow:
        uow.execute(sql_review.REPLAY_WAITS_FOR_ARCHIVE)  # never between an archive's owed check and its commit
        r = uow.execute(sql_review.REPLAY, {"id": notification_id, "tenant_id": tenant_id,
                                            "extra_attempts": get_settings().max_attempts}).first()
        if r:
            uow.execute(NOTIFY_OWED, {"lane": r.lane})
            actions.record(uow, tenant_id=r.tenant_id, actor_ref=actor_ref, action="replay",
                           target=f"notification {notification_id}", note=note)
        else:
            refused = next(iter(_refused(uow, sql_review.REPLAY_REFUSED_MANY,
                                         {"ids": [notification_id], "tenant_id": tenant_id})), None)
        uow.commit()
    return Replayed(r is not None, refused)


def resolve(tenant_id: int | None, notification_id: int, engine: Engine | None = None, *,
            actor_ref: str = "system", note: str = "") -> bool:
    with UnitOfWork(engine) as uow:
        r = uow.execute(sql_review.RESOLVE, {"id": notification_id, "tenant_id": tenant_id}).first()
        if r:
            actions.record(uow, tenant_id=r.tenant_id, actor_ref=actor_ref, action="resolve",
                           target=f"notification {notification_id}", note=note)
        uow.commit()
    return r is not None



# ---- bulk review: many rows in one transaction, each kept with who and why -------------------------------------
BULK_MAX = 1000  # rows one bulk action touches; a bigger backlog takes another pass (the answer says how many are left)


@dataclass(frozen=True)
class Bulk:
    """What a bulk action did: the rows it changed (a row already replayed, resolved or settled matched nothing),
    the FAILED rows a replay left as they are with why (`refused`: one-time codes past their end of life) and, for a
    lane-wide action, how many rows it could still change after it (over BULK_MAX)."""

    done: tuple[int, ...]
    left: int = 0
    refused: tuple[Refused, ...] = ()


def _bulk(uow: UnitOfWork, statement: Any, params: dict[str, Any], action: str, actor_ref: str, note: str,
          refused: Any = None) -> Bulk:
    if action == "replay":
        # As one replay: never between an archive's owed check and its commit.
        uow.execute(sql_review.REPLAY_WAITS_FOR_ARCHIVE)
    rows = sorted(uow.execute(statement, params).all(), key=lambda r: int(r.id))  # an UPDATE's RETURNING has no
    # order (on the partitioned ledger it follows the partitions): the audit rows are written in the ids' order
    if action == "replay":
        for lane in sorted({r.lane for r in rows}):
            uow.execute(NOTIFY_OWED, {"lane": lane})
    actions.record_many(uow, [(r.tenant_id, f"notification {r.id}") for r in rows], actor_ref=actor_ref,
                        action=action, note=note)
    left_out = _refused(uow, refused, params) if action == "replay" and refused is not None else ()
    return Bulk(tuple(sorted(int(r.id) for r in rows)), refused=left_out)


def review_many(action: str, tenant_id: int | None, ids: list[int], engine: Engine | None = None, *,
                actor_ref: str, note: str) -> Bulk:
    """Replay or resolve the chosen rows (at most BULK_MAX ids) in one commit; each changed row is kept in
    operator_actions with who and the note. Ids another tenant owns, or rows no longer FAILED, change nothing."""
    statement = {"replay": sql_review.REPLAY_MANY, "resolve": sql_review.RESOLVE_MANY}[action]
    with UnitOfWork(engine) as uow:
        out = _bulk(uow, statement, {"ids": sorted(set(ids))[:BULK_MAX], "tenant_id": tenant_id,
                                     "extra_attempts": get_settings().max_attempts}, action, actor_ref, note,
                    sql_review.REPLAY_REFUSED_MANY)
        uow.commit()
    return out


def review_lane(action: str, tenant_id: int | None, lane: str, since: datetime, engine: Engine | None = None, *,
                actor_ref: str, note: str) -> Bulk:
    """Every FAILED row of `lane` that failed at or after `since` and that no one resolved (of one tenant, or of every
    tenant for platform on-call), oldest first, at most BULK_MAX — replayed or resolved in one commit. A replay
    leaves out the one-time codes past their end of life (named in `refused`, never counted as left to do)."""
    statement = {"replay": sql_review.REPLAY_LANE_SINCE, "resolve": sql_review.RESOLVE_LANE_SINCE}[action]
    params = {"lane": lane, "tenant_id": tenant_id, "since": since, "limit": BULK_MAX,
              "extra_attempts": get_settings().max_attempts}
    with UnitOfWork(engine) as uow:
        out = _bulk(uow, statement, params, action, actor_ref, note, sql_review.REPLAY_REFUSED_LANE)
        counted = sql_review.COUNT_LANE_SINCE_REPLAYABLE if action == "replay" else sql_review.COUNT_LANE_SINCE
        left = int(uow.execute(counted, params).scalar_one())
        uow.commit()
    return Bulk(out.done, left, out.refused)


def count_lane(tenant_id: int | None, lane: str, since: datetime, engine: Engine | None = None) -> int:
    """How many rows `review_lane` would take now (shown in its confirmation)."""
    with UnitOfWork(engine) as uow:
        params = {"lane": lane, "tenant_id": tenant_id, "since": since}
        return int(uow.execute(sql_review.COUNT_LANE_SINCE, params).scalar_one())
