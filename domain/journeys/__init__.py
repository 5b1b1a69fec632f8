"""Journey nudges. One line per module:

- `steps` — the funnel's step order and nudge delays.
- `decide` — pure: what a lead event does (move and nudge, drop as late or not further, lifecycle).
- `store` — lead events applied under the one-live-nudge index.
- `views` — read models.
- `sql` — their statements.
"""
