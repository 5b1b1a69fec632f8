"""The HTTP API (/api/v1): one router per resource, assembled by `app.build_api`, mounted into Reflex's backend."""
