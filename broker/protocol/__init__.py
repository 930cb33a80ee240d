"""The Pulsar binary protocol side of the broker: the server, one `ServerConnection` per client,
command routing (`_handlers`) and the handlers by command family (lookup, producer, consumer),
the connection's authentication session and the authorization of its commands."""
