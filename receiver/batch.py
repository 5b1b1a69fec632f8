"""The dedupe write for many concurrent webhook POSTs in one statement (one commit), each answer given only after
the statement that holds its row has returned — so after its commit, as when every request had its own statement.

Requests of one server process queue their (event_id, digest, proposed ref); up to `FLUSHERS` flushers each take
what is queued (at most `MOST`) and run it as one statement on one pool connection. No timer: while a flusher is
in its round trip the next requests queue up, so one request alone is written at once and a burst shares commits.
A batch never holds one event id twice (ON CONFLICT cannot touch a row twice in one statement): a duplicate waits
for the next batch, where it meets the committed row and is answered `already_processed`, like a racing duplicate.
Rows are inserted in event-id order, so two batches racing on the same ids wait for each other, never deadlock.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from psycopg import AsyncConnection

from receiver import db

FLUSHERS = 4
MOST = 64

APPLY_EFFECTS = """
WITH input AS (
    SELECT * FROM unnest(%(ids)s::uuid[], %(digests)s::text[], %(refs)s::text[]) AS t(event_id, digest, ref)
), fx AS (
    INSERT INTO webhook_effects (event_id, effect_type, request_digest, result_ref)
    SELECT event_id, %(effect_type)s, digest, ref FROM input ORDER BY event_id
    ON CONFLICT ON CONSTRAINT webhook_effects_once DO UPDATE SET result_ref = webhook_effects.result_ref
    RETURNING event_id, result_ref, request_digest
), call AS (
    INSERT INTO webhook_deliveries (event_id, outcome)
    SELECT input.event_id, CASE WHEN fx.result_ref = input.ref THEN 'accepted'
                                WHEN fx.request_digest = input.digest THEN 'already_processed'
                                ELSE 'identity_conflict' END
    FROM input JOIN fx USING (event_id)
    RETURNING event_id, outcome
)
SELECT call.event_id, call.outcome, fx.result_ref FROM call JOIN fx USING (event_id)
"""
# One statement, one round trip for the batch: each effect is inserted once per (event_id, effect_type); a duplicate
# meets the UNIQUE constraint, waits for the racing insert to commit and locks its row (DO UPDATE, a no-op write, is
# what makes PostgreSQL return a row committed after this statement began — DO NOTHING would return none), so every
# caller reads the one effect's result_ref. Each caller proposed a fresh random ref: getting it back means its
# insert is the one that applied the effect.


@dataclass
class _Item:
    event_id: uuid.UUID
    digest: str
    ref: str
    done: asyncio.Future[tuple[str, str]]


@dataclass
class EffectBatcher:
    effect_type: str
    loop: asyncio.AbstractEventLoop
    queue: list[_Item] = field(default_factory=list)
    flushers: int = 0

    async def apply(self, event_id: uuid.UUID, digest: str, ref: str) -> tuple[str, str]:
        item = _Item(event_id, digest, ref, self.loop.create_future())
        self.queue.append(item)
        if self.flushers < FLUSHERS:
            self.flushers += 1
            self.loop.create_task(self._flush())  # referenced by the loop until done; ends when the queue is empty
        return await item.done

    def _take(self) -> list[_Item]:
        batch: list[_Item] = []
        seen: set[uuid.UUID] = set()
        rest: list[_Item] = []
        for item in self.queue:
            if len(batch) < MOST and item.event_id not in seen:
                seen.add(item.event_id)
                batch.append(item)
            else:
                rest.append(item)
        self.queue = rest
        return batch

    async def _flush(self) -> None:
        try:
            while self.queue:
                batch = self._take()
                params = {"ids": [i.event_id for i in batch], "digests": [i.digest for i in batch],
                          "refs": [i.ref for i in batch], "effect_type": self.effect_type}

                async def write(c: AsyncConnection,
                                params: dict[str, object] = params) -> dict[uuid.UUID, tuple[str, str]]:
                    rows = await (await c.execute(APPLY_EFFECTS, params)).fetchall()
                    return {r[0]: (str(r[1]), str(r[2])) for r in rows}

                try:
                    got = await db.run(write, retry=True)
                except Exception as e:  # every caller of the batch fails as its own statement would have
                    for i in batch:
                        if not i.done.done():
                            i.done.set_exception(e)
                    continue
                for i in batch:
                    if not i.done.done():
                        if i.event_id in got:
                            i.done.set_result(got[i.event_id])
                        else:
                            i.done.set_exception(RuntimeError(f"no row returned for {i.event_id}"))
        finally:
            self.flushers -= 1


_batchers: dict[asyncio.AbstractEventLoop, EffectBatcher] = {}


def batcher(effect_type: str) -> EffectBatcher:
    """One per event loop (as the pool): the tests' in-process app runs a loop per call."""
    loop = asyncio.get_running_loop()
    b = _batchers.get(loop)
    if b is None:
        for old in [k for k in _batchers if k.is_closed()]:
            del _batchers[old]
        b = _batchers[loop] = EffectBatcher(effect_type, loop)
    return b
