"""Invariant (pure): a drill that merges its section into evidence/bench.md replaces its own section only — the
sections before and after it (another drill's, `outbox bench`'s) stay word for word — and `outbox bench` keeps both
drills' sections when it rewrites the file."""

from jobs.drills.bench.report import _kept_vacuum, replace_section

MD = "# Benchmarks\n\nintro\n\n## VACUUM held back\n\nv1\n\n| a | 1 |\n\n## Replica promotion\n\nr1\n"


def test_replacing_one_section_keeps_the_others() -> None:
    out = replace_section(MD, "## VACUUM held back", "## VACUUM held back\n\nv2\n")
    assert "v2" in out and "v1" not in out and "## Replica promotion\n\nr1" in out and out.startswith("# Benchmarks")
    out = replace_section(MD, "## Replica promotion", "## Replica promotion\n\nr2\n")
    assert "r2" in out and "r1" not in out and "## VACUUM held back\n\nv1\n\n| a | 1 |" in out


def test_a_missing_section_is_appended() -> None:
    out = replace_section("# Benchmarks\n\nintro\n", "## Replica promotion", "## Replica promotion\n\nr\n")
    assert out == "# Benchmarks\n\nintro\n\n## Replica promotion\n\nr\n"


def test_bench_keeps_both_drill_sections() -> None:
    kept = "\n".join(_kept_vacuum(MD))
    assert "## VACUUM held back\n\nv1\n\n| a | 1 |" in kept and "## Replica promotion\n\nr1" in kept


def test_bench_targets_table_marks_each_figure_against_its_target() -> None:
    """Issue 26's figures are shown beside their target and their same-run baseline, met or not; a run without
    them (an `--only` of other steps on old evidence) prints no table."""
    from jobs.drills.bench.report import _targets

    lines = _targets({"cpu_ms_per_delivery": 2.5, "lean_cpu_ms_per_delivery": 1.0, "e2e_ratio_lean": 0.5,
                      "e2e_lean_per_s": 600.0})
    assert "| cpu_ms_per_delivery | 2.50 | ≤ 3 ms | ✓ | lean_cpu_ms_per_delivery 1.00 |" in lines
    assert "| e2e_ratio_lean | 0.50 | ≥ 0.8 | ✗ | e2e_lean_per_s 600.00 |" in lines
    assert not any(line.startswith("| e2e_events_per_s") for line in lines)
    assert _targets({"wake_p50_ms": 3.0}) == []
