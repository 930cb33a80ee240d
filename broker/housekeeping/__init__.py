"""What keeps stored data in bounds and explains it: the hooks retention uses (policies, quota
states, publish times), the offload policies and the broker's hook into tiered storage, deleting a
topic's stored state, inactive-topic deletion, subscription expiration, and the view of bookie
garbage collection with the history of trimmed ledgers."""
