"""A broker among others: its registration, the leader's load manager, bundle ownership, lookups
and redirects to the owner, and the clients it calls the other brokers with (admin REST in
`_broker_client`, the binary protocol in `_binary_client`)."""
