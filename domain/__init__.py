"""Domain: pure decisions (policy, retry, rules) plus the one unit of work that commits them."""
