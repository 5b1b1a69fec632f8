"""The API docs page (dashboard/api/docs.py) without a network: every asset it loads is ours.

Invariants: the docs page's HTML names no URL of another origin — its script, style sheet, icon and OpenAPI
document are same-origin paths — and each of them answers 200 with its content type (JavaScript, CSS, an image,
JSON); this holds for the API alone, with the Reflex app mounted inside it (what `api_transformer` does), and
behind a proxy that strips a path prefix (the root path). A page whose assets are missing renders blank.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from dashboard.api import docs
from dashboard.api.app import build_api


class _Refs(HTMLParser):
    """Every URL the page loads: <script src>, <link href>, <img src>; and the spec URL handed to Swagger UI."""

    def __init__(self) -> None:
        super().__init__()
        self.assets: list[tuple[str, str]] = []  # (tag, url)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href") and value is not None:
                self.assets.append((tag, value))


def _with_reflex_inside() -> FastAPI:
    async def page(_: Any) -> HTMLResponse:
        return HTMLResponse("<html>orders</html>")

    api = build_api()
    api.mount("", Starlette(routes=[Route("/orders", page)]))  # what reflex.App does with api_transformer
    return api


EXPECTED_TYPES = {"script": "text/javascript", "link": "text/css"}


@pytest.mark.parametrize(("make_app", "root"), [(build_api, ""), (_with_reflex_inside, ""), (build_api, "/outbox")],
                         ids=["api-alone", "reflex-mounted-inside", "behind-a-prefix"])
def test_the_docs_page_loads_only_same_origin_assets_that_answer(make_app: Callable[[], FastAPI],
                                                                  root: str) -> None:
    async def check() -> None:
        transport = httpx.ASGITransport(app=make_app(), root_path=root)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as c:
            page = await c.get(f"{root}{docs.DOCS_URL}")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assert "cdn" not in page.text.lower(), "no CDN named anywhere in the page"
            every_url = re.findall(r"""(?:https?:)?//[^\s"'<>)]+""", page.text)
            assert every_url == [], f"the page names another origin: {every_url}"
            refs = _Refs()
            refs.feed(page.text)
            kinds = {tag for tag, _ in refs.assets}
            assert {"script", "link"} <= kinds, refs.assets
            spec = re.search(r"url: '([^']+)'", page.text)
            assert spec is not None, "Swagger UI is told where the OpenAPI document is"
            for tag, url in [*refs.assets, ("spec", spec.group(1))]:
                assert url.startswith(f"{root}/api/docs/static/") or url == f"{root}/api/openapi.json", url
                r = await c.get(url)
                assert r.status_code == 200, (url, r.status_code)
                ctype = r.headers["content-type"]
                if tag == "spec":
                    assert ctype.startswith("application/json") and r.json()["openapi"].startswith("3.")
                elif url.endswith(".png"):
                    assert ctype == "image/png"
                else:
                    assert ctype.startswith(EXPECTED_TYPES[tag]), (url, ctype)
                    assert len(r.content) > 10_000, f"{url} is the real Swagger UI file, not a stub"
            js = next(u for t, u in refs.assets if t == "script")
            assert b"SwaggerUIBundle" in (await c.get(js)).content

    asyncio.run(check())
