"""The API keys page in a real browser.

Invariants: on-call creates a key and sees it whole exactly once (a reload shows only its prefix); the key works
with the API until revoked, and revoking asks for a confirmation with a note that the audit log keeps; support
sees the list but is offered no create or revoke; another tenant never sees this tenant's keys.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from domain.access.auth import principal_for_key
from domain.db import get_engine
from e2e.conftest import APP, shot
from jobs.ops.procs import wait_until

pytestmark = pytest.mark.e2e


def test_oncall_creates_a_key_seen_once_and_revokes_it_with_a_note(new_operator):
    a = new_operator("alice")
    a.goto(f"{APP}/keys")
    a.get_by_test_id("key-actor").fill("svc:e2e-shop")
    a.get_by_test_id("create-key").click()
    a.get_by_test_id("new-key").wait_for()
    key = a.get_by_test_id("new-key").inner_text().strip()
    p = principal_for_key(key)
    assert p is not None and p.tenant_id == 42 and p.actor_ref == "svc:e2e-shop"
    shot(a, "api-keys-created")
    a.reload()
    a.get_by_test_id("key-row").first.wait_for()
    # The tab's state comes back with the reload and the page's load clears the key: wait for that load (a
    # deadline), then only the prefix is left.
    wait_until(lambda: key not in a.content(), 10, "the reloaded page to drop the whole key")
    assert key[:8] in a.content(), "after creation only the prefix is shown"
    row = a.get_by_test_id("key-row").filter(has_text=key[:8])
    row.get_by_test_id("revoke-key").click()
    a.get_by_test_id("revoke-confirm").wait_for()
    a.get_by_test_id("confirm-revoke").click()  # no note: refused, nothing revoked
    a.get_by_test_id("error").wait_for()
    assert principal_for_key(key) is not None
    a.get_by_test_id("revoke-key").first.wait_for()
    a.get_by_test_id("key-row").filter(has_text=key[:8]).get_by_test_id("revoke-key").click()
    a.get_by_test_id("revoke-note").fill("rotated after the e2e run")
    a.get_by_test_id("confirm-revoke").click()
    a.get_by_test_id("keys-notice").wait_for()
    wait_until(lambda: principal_for_key(key) is None, 10, "the key to be revoked")
    assert "revoked" in a.get_by_test_id("key-row").filter(has_text=key[:8]).inner_text()
    with get_engine().connect() as c:
        note = c.execute(sa.text("SELECT note FROM operator_actions WHERE action = 'revoke API key' "
                                 "AND actor_ref = 'operator:alice' ORDER BY id DESC LIMIT 1")).scalar()
    assert note == "rotated after the e2e run"


def test_support_reads_without_actions_and_other_tenants_see_nothing_of_it(new_operator):
    from domain.access.auth import create_api_key

    key = create_api_key(42, "svc:e2e-visible")
    s = new_operator("sam")
    s.goto(f"{APP}/keys")
    s.get_by_test_id("key-row").first.wait_for()
    assert key[:8] in s.content() and key not in s.content()
    assert s.get_by_test_id("create-key").count() == 0 and s.get_by_test_id("revoke-key").count() == 0
    c = new_operator("carol")
    c.goto(f"{APP}/keys")
    c.get_by_role("heading", name="API keys").wait_for()
    c.wait_for_load_state("networkidle")
    assert key[:8] not in c.content()
