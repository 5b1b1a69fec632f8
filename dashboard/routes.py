"""Route constants: plain, stable paths that tests and operators bookmark."""

LOGIN = "/login"
ORDERS = "/orders"
ORDER_DETAIL = "/orders/[order_id]"
LEDGER = "/ledger"
AUDIT = "/audit"
OPS = "/ops"


def order_path(order_id: int | str) -> str:
    return f"/orders/{order_id}"
