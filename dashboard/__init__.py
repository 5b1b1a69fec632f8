"""The operator dashboard (Reflex) and the HTTP API mounted into its backend."""
