"""Drills against a whole running system, each in its own database: the scenario transcript, benchmarks, the
journey storm and chaos. Nothing in the runtime or the supervisor imports them."""
