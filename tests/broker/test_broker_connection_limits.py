"""The connection caps and handshake keys as pure logic: `ConnectionLimiter` and the config checks.

(The caps over real sockets are in test_broker_e2e_hostile.)"""

from __future__ import annotations

import pytest

from broker import BrokerConfig
from broker.protocol._server import ConnectionLimiter
from magnetar.common.config import ConfigError, load_config


def test_no_caps_admit_everything() -> None:
    limiter = ConnectionLimiter(0, 0)
    assert all(limiter.admit("10.0.0.1") is None for _ in range(1000))
    assert limiter.total == 1000


def test_per_ip_cap_counts_each_address_apart() -> None:
    limiter = ConnectionLimiter(0, 2)
    assert limiter.admit("10.0.0.1") is None and limiter.admit("10.0.0.1") is None
    refusal = limiter.admit("10.0.0.1")
    assert refusal is not None and "10.0.0.1" in refusal
    assert limiter.admit("10.0.0.2") is None
    # a refusal takes no slot; a release frees exactly one
    limiter.release("10.0.0.1")
    assert limiter.admit("10.0.0.1") is None
    assert limiter.admit("10.0.0.1") is not None


def test_total_cap_and_release_forgets_idle_addresses() -> None:
    limiter = ConnectionLimiter(2, 0)
    assert limiter.admit("a") is None and limiter.admit("b") is None
    refusal = limiter.admit("c")
    assert refusal is not None and "maximum number of connections" in refusal
    limiter.release("a")
    limiter.release("b")
    assert limiter.total == 0 and not limiter.per_ip
    assert limiter.admit("c") is None


def test_connection_keys_take_pulsar_names_and_are_checked() -> None:
    cfg = load_config(BrokerConfig, {"brokerMaxConnections": 100, "brokerMaxConnectionsPerIp": 10})
    assert (cfg.broker_max_connections, cfg.broker_max_connections_per_ip) == (100, 10)
    defaults = BrokerConfig()
    assert (defaults.broker_max_connections, defaults.broker_max_connections_per_ip) == (0, 0)
    assert 0 < defaults.handshake_timeout_s < defaults.keep_alive_interval_s
    for key in ("brokerMaxConnections", "brokerMaxConnectionsPerIp"):
        with pytest.raises(ConfigError, match="max_connections"):
            load_config(BrokerConfig, {key: -1})
    with pytest.raises(ConfigError, match="handshake_timeout_s"):
        load_config(BrokerConfig, {"handshake_timeout_s": 0.0})
