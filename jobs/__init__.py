"""Jobs: lane workers, relay and recovery scan, CLI. Thin edges over domain/."""
