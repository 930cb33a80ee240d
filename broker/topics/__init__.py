"""Topics and dispatch: persistent topics (`Topic`) over managed ledgers and non-persistent ones in
memory, their subscriptions, consumers, producers and dispatchers, with what they carry
(deduplication, delayed delivery, compaction, access modes, limits and rate limiters, statistics)."""
