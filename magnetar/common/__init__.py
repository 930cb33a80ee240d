"""Leaf modules every Magnetar package may import: each depends only on the standard library, its
own third-party library and other `magnetar.common` modules, never on a Magnetar layer.

* `config`: frozen-dataclass configs from TOML, properties files and overrides (`ConfigError`).
* `version`: the installed version.
* `tls`: SSL contexts from Pulsar / BookKeeper keys and trio TLS streams.
* `batch_histogram`: the Prometheus histogram for per-record latencies on hot paths.
* `backoff`: capped doubling retry delays.
* `durations`: Pulsar's relative-time grammar (``30s``, ``10m``, ``2h``, ``1d``, ``1w``, ``1y``).
* `http_server`: hypercorn on trio with Magnetar's TLS contexts and bind errors naming their keys.
* `admin_client`: the admin REST client (redirects followed with credentials, the server's reason
  in every error), for the CLI, the Spark connector and broker-to-broker calls.

This ``__init__`` imports none of them: a package that needs only the config loader must not load
hypercorn or httpx (`tests/test_architecture.py` checks what each one loads).
"""
