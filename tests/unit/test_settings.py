"""Invariants of configuration: one validated model, read once; a bad value stops start-up naming the variable;
booleans take the usual spellings; the README's table lists every variable the code reads, with its default."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from domain.settings import DEMO_SECRETS, Settings, SettingsError, get_settings, reload_settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    yield monkeypatch
    monkeypatch.undo()
    reload_settings()


def test_settings_are_read_once_and_cached():
    assert get_settings() is get_settings()


@pytest.mark.parametrize(("raw", "value"), [("1", True), ("true", True), ("YES", True), ("on", True),
                                            ("0", False), ("false", False), ("no", False), ("off", False)])
def test_booleans_take_the_usual_spellings(env, raw, value):
    env.setenv("OUTBOX_DEV_MODE", raw)
    assert reload_settings().dev_mode is value


@pytest.mark.parametrize(("var", "raw"), [("OUTBOX_LEASE_SECONDS", "soon"), ("OUTBOX_SLO_SECONDS", "-5"),
                                          ("OUTBOX_BULK_RATE", "0"), ("OUTBOX_DEV_MODE", "maybe"),
                                          ("OUTBOX_MAX_ATTEMPTS", "0")])
def test_a_bad_value_stops_start_up_naming_the_variable(env, var, raw):
    env.setenv(var, raw)
    with pytest.raises(SettingsError, match=re.escape(f"{var}={raw!r}")):
        reload_settings()


def _readme_table() -> dict[str, str]:
    section = README.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    return {m.group(1): m.group(2) for m in re.finditer(r"^\| `(OUTBOX_[A-Z_]+)` \| ([^|]*) \|", section, re.M)}


def _read_by_code() -> set[str]:
    names: set[str] = set()
    files = [*ROOT.glob("domain/**/*.py"), *ROOT.glob("jobs/**/*.py"), *ROOT.glob("dashboard/**/*.py"),
             *ROOT.glob("tests/**/*.py"), *ROOT.glob("e2e/*.py"), ROOT / "rxconfig.py", *ROOT.glob(".ci/*")]
    for f in files:
        if f.name != "test_settings.py":
            names |= set(re.findall(r"OUTBOX_[A-Z_]*[A-Z]", f.read_text()))
    return names


def test_readme_lists_every_variable_the_code_reads_and_no_other():
    table = _readme_table()
    in_code = _read_by_code() | set(Settings.env_names().values())
    assert set(table) == in_code, f"missing from README: {in_code - set(table)}; stale: {set(table) - in_code}"


def test_readme_defaults_are_the_models_defaults():
    table = _readme_table()
    for name, field in Settings.model_fields.items():
        var = Settings.env_names()[name]
        if name in DEMO_SECRETS:
            assert table[var].strip() == "required in production", var
            continue
        if field.default is None:  # derived from OUTBOX_ENV, or off until set
            assert "development" in table[var] or table[var].strip() == "(unset)", var
            continue
        shown = table[var].strip().strip("`")
        assert shown == (str(field.default) if field.default != "" else "(empty)"), var


def test_readme_layout_names_every_runtime_and_tool_module():
    layout = README.split("## Layout", 1)[1].split("\n## ", 1)[0]
    for folder in ("jobs", "jobs/cli", "jobs/ops", "jobs/drills", "jobs/drills/chaos", "domain", "domain/access",
                   "domain/orders", "domain/ledger", "domain/delivery", "domain/journeys", "domain/campaigns",
                   "domain/support", "dashboard/api"):
        for f in (ROOT / folder).glob("*.py"):
            if f.name != "__init__.py":
                assert f"`{f.name}`" in layout or f"`{f.stem}`" in layout, f"{folder}/{f.name} not in README"
    for mentioned in re.findall(r"`([a-z_/]+\.py)`", layout):
        assert list(ROOT.glob(f"**/{mentioned}")), f"README names {mentioned}, which does not exist"


def test_production_refuses_to_start_without_its_secrets_naming_each(env):
    """Fail closed: no demo secret, no fault switch, no open metrics unless development is asked for."""
    env.setenv("OUTBOX_ENV", "production")
    for var in ("OUTBOX_WEBHOOK_SECRET", "OUTBOX_RECEIPT_SECRET", "OUTBOX_OTP_SECRET", "OUTBOX_METRICS_TOKEN"):
        env.delenv(var, raising=False)
    with pytest.raises(SettingsError) as missing:
        reload_settings()
    for var in ("OUTBOX_WEBHOOK_SECRET", "OUTBOX_RECEIPT_SECRET", "OUTBOX_OTP_SECRET", "OUTBOX_METRICS_TOKEN"):
        assert f"{var} is not set" in str(missing.value)
    env.setenv("OUTBOX_WEBHOOK_SECRET", DEMO_SECRETS["webhook_secret"])
    with pytest.raises(SettingsError, match="OUTBOX_WEBHOOK_SECRET is the published demo value"):
        reload_settings()


def test_production_with_real_secrets_starts_without_fault_switches_and_refuses_them(env):
    env.setenv("OUTBOX_ENV", "production")
    for var in ("OUTBOX_WEBHOOK_SECRET", "OUTBOX_RECEIPT_SECRET"):
        env.setenv(var, "whsec_cmVhbC1wcm9kdWN0aW9uLXNlY3JldC0wMDAwMDAwMQ==")
    env.setenv("OUTBOX_OTP_SECRET", "a-real-otp-secret")
    env.setenv("OUTBOX_METRICS_TOKEN", "a-real-metrics-token")
    env.delenv("OUTBOX_FAULT", raising=False)
    env.delenv("OUTBOX_DEV_MODE", raising=False)
    assert reload_settings().dev_mode is False
    assert reload_settings().api_docs is False, "no map of the API in production unless asked for"
    from dashboard.api.app import build_api

    docs = {"/api/docs", "/api/docs/static", "/api/openapi.json"}
    assert not docs & {getattr(r, "path", "") for r in build_api().routes}
    env.setenv("OUTBOX_API_DOCS", "1")
    assert reload_settings().api_docs is True
    assert docs <= {getattr(r, "path", "") for r in build_api().routes}, "asked for: the page, its files, the map"
    env.delenv("OUTBOX_API_DOCS")
    env.setenv("OUTBOX_DEV_MODE", "1")
    with pytest.raises(SettingsError, match="OUTBOX_DEV_MODE needs OUTBOX_ENV=development"):
        reload_settings()
    env.setenv("OUTBOX_DEV_MODE", "0")
    env.setenv("OUTBOX_FAULT", "after_local_ack")
    with pytest.raises(SettingsError, match="OUTBOX_FAULT needs OUTBOX_ENV=development"):
        reload_settings()


def test_development_fills_in_the_demo_secrets_and_turns_fault_switches_on(env):
    env.setenv("OUTBOX_ENV", "development")
    env.delenv("OUTBOX_WEBHOOK_SECRET", raising=False)
    env.delenv("OUTBOX_DEV_MODE", raising=False)
    s = reload_settings()
    assert s.webhook_secret == DEMO_SECRETS["webhook_secret"] and s.dev_mode is True


@pytest.mark.parametrize("var", ["OUTBOX_REFRESH_PUBLISH", "OUTBOX_WAKE_AFTER_COMMIT"])
def test_production_refuses_to_run_without_a_fast_path(env, var):
    """Fail closed: switching a fast path off is for tests and drills; production always runs with both."""
    env.setenv("OUTBOX_ENV", "development")
    env.setenv(var, "0")
    assert reload_settings().model_dump()[var.removeprefix("OUTBOX_").lower()] is False
    env.setenv("OUTBOX_ENV", "production")
    with pytest.raises(SettingsError, match=f"{var}=0 needs OUTBOX_ENV=development"):
        reload_settings()
    env.delenv(var)
    with pytest.raises(SettingsError) as still_refused:  # the demo secrets, not the fast paths, stop it now
        reload_settings()
    assert var not in str(still_refused.value)
