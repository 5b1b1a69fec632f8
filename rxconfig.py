import os

import reflex as rx

# Ports come from the command line (`reflex run --env prod --frontend-port P --backend-port P`): prod mode serves
# pages, the /_event websocket and the /api routes on that one port.
config = rx.Config(
    app_name="dashboard",
    telemetry_enabled=False,
    show_built_with_reflex=False,
    # Several dashboard backends share sessions through Reflex's Redis state manager (`outbox up --scale N` sets this
    # to its own Redis db); unset, one backend keeps them in its own memory.
    redis_url=os.environ.get("OUTBOX_DASHBOARD_STATE_URL") or None,
    # The client address is ours to read (OUTBOX_TRUSTED_PROXIES, domain/access/peers.py), never a hop count: the
    # session's client_ip stays the websocket's peer.
    trusted_proxy_hops=0,
    cors_allowed_origins=[os.environ.get("OUTBOX_APP_URL", "http://127.0.0.1:3000"), "http://localhost:3000"],
    plugins=[rx.plugins.RadixThemesPlugin(theme=rx.theme(accent_color="indigo", gray_color="slate", radius="medium"))],
    disable_plugins=[rx.plugins.SitemapPlugin],
)
