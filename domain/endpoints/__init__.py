"""Webhook endpoints per tenant (Svix's model): the URL guard (`urls.py`) and the endpoints themselves with their
secrets (`store.py`)."""
