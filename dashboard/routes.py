"""Route constants: plain, stable paths that tests and operators bookmark."""

LOGIN = "/login"
ORDERS = "/orders"
ORDER_DETAIL = "/orders/[order_id]"
LEDGER = "/ledger"
AUDIT = "/audit"
OPS = "/ops"
JOURNEYS = "/journeys"

RECIPIENTS = "/recipients"
RECIPIENT_DETAIL = "/recipients/[recipient_id]"
BALANCE = "/balance"
CAMPAIGNS = "/campaigns"
