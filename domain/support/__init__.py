"""Support's read room: find anything by anything, one page per message, keyset pages and exports. It reads the
ledger, orders, journeys and campaigns; it writes nothing and nothing leans on it."""
