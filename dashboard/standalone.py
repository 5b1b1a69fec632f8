"""The HTTP API alone (no Reflex pages), for headless deployments and integration tests:
`uvicorn dashboard.standalone:app`."""

from dashboard.api.app import build_api
from domain import logs

logs.configure("api")
app = build_api()
