"""The API's docs page, whole from this process: Swagger UI's script, style sheet and icon are the files of the
pinned `fastapi-offline` package, served under /api/docs/static — FastAPI's default page loads them from a public
CDN, so behind a firewall it stayed blank.

Everything is under /api/docs, so no Reflex page is hidden by a route, and the same URLs work whether the API runs
alone (`dashboard.standalone`) or with the Reflex app mounted inside it (`dashboard.dashboard`), behind nginx too
(it sends every /api path to a backend). Only installed when docs are on (`OUTBOX_API_DOCS`, see `app.build_api`).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

DOCS_URL = "/api/docs"
STATIC_URL = f"{DOCS_URL}/static"
# The package's own folder of Swagger UI's dist files (it ships ReDoc's too, unused here).
ASSETS = ("fastapi_offline", "static")
SWAGGER_JS, SWAGGER_CSS, FAVICON = "swagger-ui-bundle.js", "swagger-ui.css", "favicon.png"


def install(api: FastAPI, openapi_url: str) -> None:
    """The docs page at DOCS_URL and its assets at STATIC_URL. Registered before the routers: the JSON 404 for
    unknown /api paths (registered last) must not answer for them."""
    api.mount(STATIC_URL, StaticFiles(packages=[ASSETS]), name="docs-static")

    @api.get(DOCS_URL, include_in_schema=False)
    async def docs_page(request: Request) -> HTMLResponse:
        # Behind a proxy that strips a prefix (uvicorn --root-path) every URL keeps it, as FastAPI's own page does.
        root = str(request.scope.get("root_path", "")).rstrip("/")
        return get_swagger_ui_html(openapi_url=root + openapi_url, title=f"{api.title} - Swagger UI",
                                   swagger_js_url=f"{root}{STATIC_URL}/{SWAGGER_JS}",
                                   swagger_css_url=f"{root}{STATIC_URL}/{SWAGGER_CSS}",
                                   swagger_favicon_url=f"{root}{STATIC_URL}/{FAVICON}")
