"""Who may do what: operators and API keys (`auth`), the one table of roles (`roles`), the privileged-action log
(`actions`)."""
