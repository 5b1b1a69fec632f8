"""Orders: the pure transition policy (`policy`), the commands that commit an order change with its outbox event in
one transaction (`commands`), the event envelope (`envelope`), who hears about which event (`audience`), read models
(`views`)."""
