"""A broker among others: its registration, the leader's load manager, bundle ownership, lookups
and redirects to the owner, and the client it calls the other brokers with."""
