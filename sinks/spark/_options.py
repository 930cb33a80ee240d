"""The data source's options, parsed once into a frozen, picklable dataclass.

Option names follow the Pulsar and Kafka Spark connectors (Spark hands them over case-insensitive).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ._read import ReadConfig
from ._security import ClientSecurity

__all__ = ["SinkOptions", "SourceOptions", "parse_bool", "DEDUP_CURSOR"]

DEDUP_CURSOR = "pulsar.dedup"
"""The broker's internal deduplication cursor: never a subscription of the source."""


def parse_bool(key: str, value: str) -> bool:
    """``true``/``false`` (any case) -> bool; ValueError naming ``key`` otherwise."""
    lowered = str(value).strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"option {key}: expected true or false, not {value!r}")


def _positive(key: str, value: str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"option {key}: expected a positive integer, not {value!r}") from None
    if n <= 0:
        raise ValueError(f"option {key}: must be positive, not {n}")
    return n


def _bookkeeper_options(opts: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``bookkeeper.<key>`` options (any case, as Spark hands them over) as the BookKeeper client's
    keys, checked now so that a typo fails on the driver; ValueError naming the option."""
    given = {k[len("bookkeeper."):]: v for k, v in opts.items() if k.startswith("bookkeeper.")}
    if not given:
        return ()
    import dataclasses

    from bk_client import ClientConfig
    from magnetar.common.config import ConfigError, load_config

    spelled: dict[str, str] = {}
    for f in dataclasses.fields(ClientConfig):
        for name in (f.name, f.metadata.get("alias")):
            if name:
                spelled[name.lower()] = f.name
    out = []
    for key, value in given.items():
        if key not in spelled:
            raise ValueError(f"option bookkeeper.{key}: not a BookKeeper client key")
        out.append((spelled[key], str(value)))
    try:
        load_config(ClientConfig, None, dict(out))
    except ConfigError as exc:
        raise ValueError(f"option bookkeeper.{exc.key}: {exc}") from None
    return tuple(out)


def _zk_credentials(opts: Mapping[str, str]) -> str:
    value = str(opts.get("metadata.zkdigestcredentials", "")).strip()
    if not value:
        return ""
    from magnetar.common.config import ConfigError
    from metadata import ZkSecurity

    try:
        security = ZkSecurity.from_config(True, value)
    except ConfigError as exc:  # name the option as Spark users spell it
        raise ValueError(f"option metadata.zkDigestCredentials: {exc}") from None
    assert security is not None  # enabled: never None
    return security.digest


@dataclass(frozen=True)
class SourceOptions:
    """Options of ``spark.readStream.format("magnetar")`` / ``spark.read.format("magnetar")``."""

    service_url: str
    admin_url: str
    topics: tuple[str, ...] = ()
    topics_pattern: str = ""
    starting_offsets: str = "latest"
    ending_offsets: str = "latest"
    starting_time: int | None = None
    fail_on_data_loss: bool = True
    max_entries_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    subscription_name: str = ""
    read_mode: str = "broker"
    metadata_url: str = ""
    metadata_root: str = ""
    read_timeout_ms: int = 30_000
    max_entries_per_task: int | None = None
    decode_schema: bool = True
    ledger_password: str = ""
    security: ClientSecurity = ClientSecurity()
    bookkeeper_options: tuple[tuple[str, str], ...] = ()
    zk_credentials: str = ""

    @classmethod
    def parse(cls, options: Mapping[str, str], *, batch: bool = False) -> SourceOptions:
        """Check and parse; raises ValueError naming the offending option."""
        opts = {k.lower(): v for k, v in options.items()}
        service_url = opts.get("service.url", "")
        admin_url = opts.get("admin.url", "")
        if not admin_url:
            raise ValueError("option admin.url is required (the broker's admin REST, "
                             "e.g. http://127.0.0.1:8080)")
        if not service_url:
            raise ValueError("option service.url is required (e.g. pulsar://127.0.0.1:6650)")
        given = [k for k in ("topic", "topics", "topicspattern") if opts.get(k)]
        if len(given) != 1:
            raise ValueError("set exactly one of the options topic, topics, topicsPattern")
        topics: tuple[str, ...] = ()
        pattern = ""
        if "topicspattern" in given:
            pattern = opts["topicspattern"]
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"option topicsPattern: not a regular expression: {exc}") from None
        else:
            topics = tuple(t.strip() for t in opts[given[0]].split(",") if t.strip())
        if opts.get("subscriptionname", "") == DEDUP_CURSOR:
            raise ValueError(f"option subscriptionName: {DEDUP_CURSOR!r} is the broker's deduplication "
                             "cursor, not a subscription; choose another name")
        mode = opts.get("readmode", "broker").lower()
        if mode not in ("broker", "bookies"):
            raise ValueError(f"option readMode: broker or bookies, not {mode!r}")
        if mode == "bookies" and not opts.get("metadata.url"):
            raise ValueError("option readMode=bookies needs metadata.url "
                             "(a zk:// URL the executors can reach)")
        starting_time = None
        if opts.get("startingtime"):
            try:
                starting_time = int(opts["startingtime"])
            except ValueError:
                raise ValueError(f"option startingTime: milliseconds since the epoch, "
                                 f"not {opts['startingtime']!r}") from None
        return cls(
            service_url=service_url,
            admin_url=admin_url,
            topics=topics,
            topics_pattern=pattern,
            starting_offsets=opts.get("startingoffsets", "earliest" if batch else "latest"),
            ending_offsets=opts.get("endingoffsets", "latest"),
            starting_time=starting_time,
            fail_on_data_loss=parse_bool("failOnDataLoss", opts.get("failondataloss", "true")),
            max_entries_per_trigger=_positive("maxEntriesPerTrigger", opts.get("maxentriespertrigger")),
            max_bytes_per_trigger=_positive("maxBytesPerTrigger", opts.get("maxbytespertrigger")),
            subscription_name=opts.get("subscriptionname", ""),
            read_mode=mode,
            metadata_url=opts.get("metadata.url", ""),
            metadata_root=opts.get("metadata.root", ""),
            read_timeout_ms=_positive("readTimeoutMs", opts.get("readtimeoutms")) or 30_000,
            max_entries_per_task=_positive("maxEntriesPerTask", opts.get("maxentriespertask")),
            decode_schema=parse_bool("decodeSchema", opts.get("decodeschema", "true")),
            ledger_password=opts.get("managedledgerpassword", ""),
            security=ClientSecurity.parse(opts),
            bookkeeper_options=_bookkeeper_options(opts),
            zk_credentials=_zk_credentials(opts),
        )

    def read_config(self) -> ReadConfig:
        """What executors need to read."""
        return ReadConfig(self.service_url, self.read_mode, self.metadata_url, self.metadata_root,
                          self.fail_on_data_loss, self.read_timeout_ms, ledger_password=self.ledger_password,
                          security=self.security, bookkeeper_options=self.bookkeeper_options,
                          zk_credentials=self.zk_credentials)


@dataclass(frozen=True)
class SinkOptions:
    """Options of ``writeStream.format("magnetar")``."""

    service_url: str
    topic: str
    admin_url: str = ""
    enable_deduplication: bool = True
    producer_name_prefix: str = "spark"
    fail_once_after_rows: int | None = None
    security: ClientSecurity = ClientSecurity()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Check and parse; raises ValueError naming the offending option."""
        opts = {k.lower(): v for k, v in options.items()}
        if not opts.get("service.url"):
            raise ValueError("option service.url is required (e.g. pulsar://127.0.0.1:6650)")
        if not opts.get("topic"):
            raise ValueError("option topic is required for the sink")
        return cls(
            service_url=opts["service.url"],
            topic=opts["topic"],
            admin_url=opts.get("admin.url", ""),
            enable_deduplication=parse_bool("enableDeduplication", opts.get("enablededuplication", "true")),
            producer_name_prefix=opts.get("producernameprefix", "spark"),
            fail_once_after_rows=_positive("failOnceAfterRows", opts.get("failonceafterrows")),
            security=ClientSecurity.parse(opts),
        )
