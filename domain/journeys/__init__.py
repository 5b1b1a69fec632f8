"""Journey nudges: the step order and delays (`steps`), the pure decision (`decide`), applying lead events
(`store`), read models (`views`)."""
