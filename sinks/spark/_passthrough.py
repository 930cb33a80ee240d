"""``pulsar.client.*``, ``pulsar.reader.*``, ``pulsar.producer.*`` and ``pulsar.admin.*`` options.

The Pulsar Spark connector hands these keys to the Java client's configuration objects and refuses a
key those objects do not have. This connector runs the official Python client, so each key is, after
the prefix (any case, as Spark hands options over):

* Rule 1: a key the Python client can apply is translated to its keyword argument (table below);
  TLS and authentication keys go through `ClientSecurity` (client and admin alike).
* Rule 2: a key of the Java configuration that cannot be applied here, or that would break what the
  connector promises (exact replay, exactly-once writes), is refused with the reason.
* Rule 3: a key the Java configuration does not have is refused as unknown, naming the close ones.

Nothing is dropped without a word. Values are checked (type, range) on the driver, so a bad one
fails when the query is defined, not in a task.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["PREFIXES", "client_kwargs", "producer_kwargs", "reader_kwargs", "admin_timeout", "hashing_scheme"]

PREFIXES = ("pulsar.client.", "pulsar.reader.", "pulsar.producer.", "pulsar.admin.")

# The keys of Pulsar's Java ClientConfigurationData, ReaderConfigurationData and
# ProducerConfigurationData (the names the Pulsar Spark connector accepts after each prefix).
_CLIENT_KEYS = tuple(
    (  # noqa: SIM905 (Pulsar's field list, as one text)
        "serviceUrl authPluginClassName authParams authParamMap operationTimeoutMs lookupTimeoutMs "
        "statsIntervalSeconds numIoThreads numListenerThreads connectionsPerBroker connectionMaxIdleSeconds "
        "useTcpNoDelay useTls tlsKeyFilePath tlsCertificateFilePath tlsTrustCertsFilePath "
        "tlsAllowInsecureConnection tlsHostnameVerificationEnable concurrentLookupRequest maxLookupRequest "
        "maxLookupRedirects maxNumberOfRejectedRequestPerConnection keepAliveIntervalSeconds connectionTimeoutMs "
        "requestTimeoutMs readTimeoutMs autoCertRefreshSeconds initialBackoffIntervalNanos maxBackoffIntervalNanos "
        "enableBusyWait listenerName useKeyStoreTls sslProvider tlsKeyStoreType tlsKeyStorePath tlsKeyStorePassword "
        "tlsTrustStoreType tlsTrustStorePath tlsTrustStorePassword tlsCiphers tlsProtocols memoryLimitBytes "
        "proxyServiceUrl proxyProtocol enableTransaction dnsLookupBindAddress dnsLookupBindPort socks5ProxyAddress "
        "socks5ProxyUsername socks5ProxyPassword description"
    ).split()
)
_READER_KEYS = tuple(
    (  # noqa: SIM905 (Pulsar's field list, as one text)
        "topicNames startMessageId startMessageFromRollbackDurationInSec receiverQueueSize readerListener readerName "
        "subscriptionRolePrefix subscriptionName cryptoKeyReader cryptoFailureAction readCompacted resetIncludeHead "
        "keyHashRanges poolMessages autoUpdatePartitions autoUpdatePartitionsIntervalSeconds "
        "expireTimeOfIncompleteChunkedMessageMillis maxPendingChunkedMessage "
        "autoAckOldestChunkedMessageOnQueueFull"
    ).split()
)
_PRODUCER_KEYS = tuple(
    (  # noqa: SIM905 (Pulsar's field list, as one text)
        "topicName producerName sendTimeoutMs blockIfQueueFull maxPendingMessages maxPendingMessagesAcrossPartitions "
        "messageRoutingMode hashingScheme cryptoFailureAction customMessageRouter batchingMaxPublishDelayMicros "
        "batchingPartitionSwitchFrequencyByPublishDelay batchingMaxMessages batchingMaxBytes batchingEnabled "
        "batcherBuilder chunkingEnabled chunkMaxMessageSize cryptoKeyReader messageCrypto encryptionKeys "
        "compressionType initialSequenceId autoUpdatePartitions autoUpdatePartitionsIntervalSeconds multiSchema "
        "accessMode lazyStartPartitionedProducers properties initialSubscriptionName"
    ).split()
)

# handled by ClientSecurity (see _security), for pulsar.client.* and pulsar.admin.*
SECURITY_KEYS = (
    "authPluginClassName",
    "authParams",
    "tlsTrustCertsFilePath",
    "tlsAllowInsecureConnection",
    "tlsHostnameVerificationEnable",
    "tlsCertificateFilePath",
    "tlsKeyFilePath",
)


def _int(lo: int, hi: int = 2**31 - 1) -> Callable[[str, str], int]:
    def parse(key: str, value: str) -> int:
        try:
            n = int(str(value).strip())
        except ValueError:
            raise ValueError(f"option {key}: expected an integer, not {value!r}") from None
        if not lo <= n <= hi:
            raise ValueError(f"option {key}: must be between {lo} and {hi}, not {n}")
        return n

    return parse


def _bool(key: str, value: str) -> bool:
    lowered = str(value).strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"option {key}: expected true or false, not {value!r}")


def _text(key: str, value: str) -> str:
    if not str(value).strip():
        raise ValueError(f"option {key}: must not be empty")
    return str(value).strip()


def _compression(key: str, value: str) -> str:
    name = str(value).strip().upper()
    if name not in ("NONE", "LZ4", "ZLIB", "ZSTD", "SNAPPY"):
        raise ValueError(f"option {key}: NONE, LZ4, ZLIB, ZSTD or SNAPPY, not {value!r}")
    return name


def _seconds_from_ms(key: str, value: str) -> int:
    return max(1, _int(1)(key, value) // 1000)


# Rule 1: Java key -> (python keyword, parser)
_CLIENT_MAP: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "operationTimeoutMs": ("operation_timeout_seconds", _seconds_from_ms),
    "connectionTimeoutMs": ("connection_timeout_ms", _int(1)),
    "numIoThreads": ("io_threads", _int(1, 64)),
    "numListenerThreads": ("message_listener_threads", _int(1, 64)),
    "concurrentLookupRequest": ("concurrent_lookup_requests", _int(1)),
    "statsIntervalSeconds": ("stats_interval_in_seconds", _int(0)),
    "useTls": ("use_tls", _bool),
    "listenerName": ("listener_name", _text),
}
_READER_MAP: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "receiverQueueSize": ("receiver_queue_size", _int(1)),
    "readerName": ("reader_name", _text),
    "subscriptionRolePrefix": ("subscription_role_prefix", _text),
}
_PRODUCER_MAP: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "sendTimeoutMs": ("send_timeout_millis", _int(0)),
    "compressionType": ("compression_type", _compression),
    "maxPendingMessages": ("max_pending_messages", _int(1)),
    "maxPendingMessagesAcrossPartitions": ("max_pending_messages_across_partitions", _int(1)),
    "batchingMaxMessages": ("batching_max_messages", _int(1)),
    "batchingMaxBytes": ("batching_max_allowed_size_in_bytes", _int(1)),
    "batchingEnabled": ("batching_enabled", _bool),
}
# Rule 2: Java keys refused on purpose, with the reason
_REFUSED: dict[str, str] = {
    "pulsar.client.serviceUrl": "use the service.url option",
    "pulsar.reader.subscriptionName": "readers are non-durable; name the durable subscription with "
    "subscriptionName (or predefinedSubscription)",
    "pulsar.reader.readCompacted": "a compacted view cannot be replayed exactly; read the topic itself",
    "pulsar.reader.startMessageId": "use startingOffsets",
    "pulsar.reader.topicNames": "use topic, topics or topicsPattern",
    "pulsar.producer.topicName": "use the topic option or a __topic column",
    "pulsar.producer.producerName": "exactly-once writes name producers themselves; use producerNamePrefix",
    "pulsar.producer.initialSequenceId": "exactly-once writes number the messages themselves",
    "pulsar.producer.batchingMaxPublishDelayMicros": "exactly-once writes never cut a batch by time",
    "pulsar.producer.blockIfQueueFull": "the sink always blocks when its queue is full",
    "pulsar.producer.messageRoutingMode": "keyed messages go where the official clients send them; unkeyed "
    "ones by a hash of the value, so a re-sent message meets its duplicate",
    "pulsar.producer.chunkingEnabled": "chunked messages cannot be deduplicated by batch",
}


def _known(prefix: str) -> tuple[str, ...]:
    return {
        "pulsar.client.": _CLIENT_KEYS,
        "pulsar.admin.": _CLIENT_KEYS,
        "pulsar.reader.": _READER_KEYS,
        "pulsar.producer.": _PRODUCER_KEYS,
    }[prefix]


def _canonical(prefix: str, key: str) -> str:
    """The Java spelling of ``key`` (any case); ValueError naming close keys when unknown (Rule 3)."""
    by_lower = {k.lower(): k for k in _known(prefix)}
    if key.lower() in by_lower:
        return by_lower[key.lower()]
    close = difflib.get_close_matches(key.lower(), list(by_lower), n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(prefix + by_lower[c] for c in close)}?)" if close else ""
    raise ValueError(f"option {prefix}{key}: not a key of Pulsar's {prefix[7:-1]} configuration{hint}")


def _collect(
    opts: Mapping[str, str],
    prefix: str,
    mapping: dict[str, tuple[str, Callable[[str, str], Any]]],
    also_ok: tuple[str, ...] = (),
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for raw, value in opts.items():
        if not raw.lower().startswith(prefix):
            continue
        key = _canonical(prefix, raw[len(prefix) :])
        full = prefix + key
        if key in also_ok:
            continue
        if full in _REFUSED:
            raise ValueError(f"option {full} is not accepted: {_REFUSED[full]}")
        if key not in mapping:
            raise ValueError(
                f"option {full}: the Python client this connector runs cannot apply it "
                f"(it applies {', '.join(prefix + k for k in sorted(mapping))}"
                f"{' and the TLS and authentication keys' if also_ok else ''})"
            )
        kwarg, parse = mapping[key]
        out[kwarg] = parse(full, value)
    return out


def client_kwargs(opts: Mapping[str, str]) -> tuple[tuple[str, Any], ...]:
    """``pulsar.client.*`` as ``pulsar.Client`` keyword arguments (TLS and authentication excluded:
    see `ClientSecurity`). Raises ValueError per Rules 2 and 3."""
    return tuple(sorted(_collect(opts, "pulsar.client.", _CLIENT_MAP, SECURITY_KEYS).items()))


def reader_kwargs(opts: Mapping[str, str]) -> tuple[tuple[str, Any], ...]:
    """``pulsar.reader.*`` as ``create_reader`` keyword arguments. Raises ValueError."""
    return tuple(sorted(_collect(opts, "pulsar.reader.", _READER_MAP).items()))


def producer_kwargs(opts: Mapping[str, str]) -> tuple[tuple[str, Any], ...]:
    """``pulsar.producer.*`` as ``create_producer`` keyword arguments (``hashingScheme`` left to
    `hashing_scheme`). Raises ValueError."""
    return tuple(sorted(_collect(opts, "pulsar.producer.", _PRODUCER_MAP, ("hashingScheme",)).items()))


def hashing_scheme(opts: Mapping[str, str]) -> str:
    """``pulsar.producer.hashingScheme``: ``JavaStringHash`` (the Java client's default, and so
    pulsar-spark's) or ``Murmur3_32Hash``; the C++ client's ``BoostHash`` is refused (its value
    depends on the Boost release the client was built with)."""
    for raw, value in opts.items():
        if raw.lower() == "pulsar.producer.hashingscheme":
            name = {"javastringhash": "JavaStringHash", "murmur3_32hash": "Murmur3_32Hash"}.get(str(value).lower())
            if name is None:
                raise ValueError(
                    f"option pulsar.producer.hashingScheme: JavaStringHash or Murmur3_32Hash, not {value!r}"
                )
            return name
    return "JavaStringHash"


def admin_timeout(opts: Mapping[str, str]) -> float | None:
    """The admin REST timeout in seconds from ``pulsar.admin.requestTimeoutMs`` (or
    ``connectionTimeoutMs``); None when not set. Other ``pulsar.admin.*`` keys besides TLS and
    authentication are refused (Rules 2 and 3)."""
    mapping = {"requestTimeoutMs": ("request", _int(1)), "connectionTimeoutMs": ("connect", _int(1))}
    got = _collect(opts, "pulsar.admin.", mapping, SECURITY_KEYS)
    ms = got.get("request") or got.get("connect")
    return ms / 1000 if ms else None
