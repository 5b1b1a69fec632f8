"""Tools around the runtime: the `outbox` command line, scenario, benchmarks, process supervision, database admin."""
