"""What keeps stored data in bounds and explains it: the hooks retention uses (policies, quota
states, publish times), deleting a topic's stored state, inactive-topic deletion, subscription
expiration, and the view of bookie garbage collection with the history of trimmed ledgers."""
