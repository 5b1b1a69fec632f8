"""The logical replication slot the CDC relay reads: checked, created, peeked, advanced, measured. Fail closed:
where logical decoding cannot run, `LogicalDecodingUnavailable` says exactly what to run; nothing here changes a
server setting."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from domain.cdc import sql


class LogicalDecodingUnavailable(RuntimeError):
    """This PostgreSQL cannot decode its WAL for us yet; the message says what an operator must run."""


@dataclass(frozen=True)
class SlotLag:
    confirmed_lsn: str
    retained_bytes: int  # WAL the primary keeps for the slot
    behind_bytes: int  # WAL written since the last confirmed commit


def check_ready(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    level = str(_one(conn, sql.WAL_LEVEL))
    if level != "logical":
        raise LogicalDecodingUnavailable(
            f"PostgreSQL runs with wal_level = {level}; the CDC relay needs logical decoding. Run, as a superuser: "
            "psql -c \"ALTER SYSTEM SET wal_level = logical\" and restart PostgreSQL "
            "(Debian: sudo pg_ctlcluster <version> main restart). The CDC relay changes no server setting itself.")
    allowed = _one(conn, sql.ALLOWED_PLUGINS)
    if allowed is not None and "wal2json" not in [p.strip() for p in str(allowed).split(",")]:
        raise LogicalDecodingUnavailable(
            f"this PostgreSQL allows only the output plugins output_plugin_libraries = '{allowed}'; the CDC relay "
            f"decodes with wal2json. Run, as a superuser: psql -c \"ALTER SYSTEM SET output_plugin_libraries = "
            f"'{allowed}, wal2json'\" and psql -c \"SELECT pg_reload_conf()\".")


def ensure_slot(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> bool:
    """Create the slot (wal2json) unless it exists; True when created. A slot of another plugin is refused."""
    row = conn.execute(sql.SLOT_EXISTS, {"slot": slot}).fetchone()
    if row is not None:
        if row[0] != "wal2json":
            raise LogicalDecodingUnavailable(f"replication slot {slot!r} exists with plugin {row[0]!r}, not wal2json: "
                                             f"drop it (SELECT pg_drop_replication_slot('{slot}')) or pick another "
                                             "OUTBOX_CDC_SLOT")
        return False
    try:
        conn.execute(sql.CREATE_SLOT, {"slot": slot})
    except psycopg.errors.UndefinedFile as e:
        major = _one(conn, sql.SERVER_MAJOR)
        raise LogicalDecodingUnavailable(
            f"the wal2json output plugin is not installed on the server: run 'sudo apt-get install -y "
            f"postgresql-{major}-wal2json' ({e.diag.message_primary})") from e
    return True


def peek(conn: psycopg.Connection[tuple[object, ...]], slot: str, upto_rows: int) -> list[tuple[str, str, str]]:
    return [(str(a), str(b), str(c)) for a, b, c in conn.execute(sql.PEEK_CHANGES, {"slot": slot, "n": upto_rows})]


def advance(conn: psycopg.Connection[tuple[object, ...]], slot: str, lsn: str) -> None:
    """Confirm everything up to and including the transaction whose commit ends at `lsn`."""
    conn.execute(sql.ADVANCE_SLOT, {"slot": slot, "lsn": lsn})


def lag(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> SlotLag | None:
    row = conn.execute(sql.SLOT_LAG, {"slot": slot}).fetchone()
    return None if row is None else SlotLag(str(row[0]), int(str(row[1] or 0)), int(str(row[2] or 0)))


def drop(conn: psycopg.Connection[tuple[object, ...]], slot: str) -> None:
    if conn.execute(sql.SLOT_EXISTS, {"slot": slot}).fetchone() is not None:
        conn.execute(sql.DROP_SLOT, {"slot": slot})


def _one(conn: psycopg.Connection[tuple[object, ...]], statement: str) -> object:
    row = conn.execute(statement).fetchone()
    assert row is not None
    return row[0]
