"""Domain, grouped by capability: `access`, `orders`, `ledger`, `delivery`, `journeys`, `campaigns`; beside them the
one unit of work (`db`), settings, the one schema (`models`), fault points (`faults`) and the invariants."""
