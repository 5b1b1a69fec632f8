"""Webhook endpoints' named SQL, in one place (store.py runs them). Every statement filters on the tenant: another
tenant's endpoint is exactly a missing one. No read but `SECRETS` (the sender's) returns a secret."""

from __future__ import annotations

import sqlalchemy as sa

PUBLIC_COLUMNS = ("id, url, description, event_types, disabled_at IS NULL AS enabled, created_at, updated_at, "
                  "previous_secret_until")

CREATE = sa.text(
    "INSERT INTO webhook_endpoints (tenant_id, url, description, event_types, secret) "
    "VALUES (:t, :u, :d, CAST(:e AS jsonb), :s) RETURNING " + PUBLIC_COLUMNS)
LIST = sa.text(f"SELECT {PUBLIC_COLUMNS} FROM webhook_endpoints WHERE tenant_id = :t ORDER BY id")
GET = sa.text(f"SELECT {PUBLIC_COLUMNS} FROM webhook_endpoints WHERE tenant_id = :t AND id = :i")
SET_ENABLED = sa.text(
    "UPDATE webhook_endpoints SET disabled_at = CASE WHEN :on THEN NULL ELSE coalesce(disabled_at, now()) END, "
    f"updated_at = now() WHERE tenant_id = :t AND id = :i RETURNING {PUBLIC_COLUMNS}")
DELETE = sa.text("DELETE FROM webhook_endpoints WHERE tenant_id = :t AND id = :i RETURNING url")
ROTATE = sa.text(
    "UPDATE webhook_endpoints SET previous_secret = secret, previous_secret_until = :until, secret = :s, "
    f"updated_at = :now WHERE tenant_id = :t AND id = :i RETURNING {PUBLIC_COLUMNS}")
SECRETS = sa.text("SELECT secret, previous_secret, previous_secret_until FROM webhook_endpoints "
                  "WHERE tenant_id = :t AND id = :i")
