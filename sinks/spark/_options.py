"""The data source's options, parsed once into a frozen, picklable dataclass.

Option names follow the Pulsar Spark connector (``pulsar-spark``) and the Kafka one; Spark hands
them over case-insensitive. Every option is checked where the query is defined: a name that is
not an option of the source (or sink) is refused, naming the close ones (a misspelt
``maxEntriesPerTriger`` fails instead of being ignored); ``pulsar.*`` keys follow `_passthrough`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._passthrough import admin_timeout, client_kwargs, hashing_scheme, producer_kwargs, reader_kwargs
from ._read import ReadConfig
from ._security import ClientSecurity

__all__ = [
    "SinkOptions",
    "SourceOptions",
    "parse_bool",
    "DEDUP_CURSOR",
    "SOURCE_OPTIONS",
    "SINK_OPTIONS",
    "check_names",
]

SOURCE_OPTIONS = (
    "service.url",
    "admin.url",
    "topic",
    "topics",
    "topicsPattern",
    "startingOffsets",
    "endingOffsets",
    "startingTime",
    "endingTime",
    "failOnDataLoss",
    "maxEntriesPerTrigger",
    "maxBytesPerTrigger",
    "maxEntriesPerTask",
    "readTimeoutMs",
    "pollTimeoutMs",
    "subscriptionName",
    "predefinedSubscription",
    "subscriptionPrefix",
    "durableSubscription",
    "pipelineName",
    "readMode",
    "metadata.url",
    "metadata.root",
    "metadata.zkDigestCredentials",
    "managedLedgerPassword",
    "decodeSchema",
    "allowDifferentTopicSchemas",
    "waitingForNonExistedTopic",
    "s3ManagedLedgerOffloadCredentialId",
    "s3ManagedLedgerOffloadCredentialSecret",
)
"""Every option of the source besides the ``pulsar.client.``, ``pulsar.reader.``, ``pulsar.admin.``
and ``bookkeeper.`` keys."""

SINK_OPTIONS = (
    "service.url",
    "admin.url",
    "topic",
    "enableDeduplication",
    "producerNamePrefix",
    "valueSchema",
    "failOnceAfterRows",
    "checkpointLocation",
    "path",
)
"""Every option of the sink besides the ``pulsar.client.``, ``pulsar.producer.`` and ``pulsar.admin.``
keys (``checkpointLocation`` and ``path`` are Spark's own)."""

AUTO_PREFIX = "magnetar-spark"
"""Default prefix of the durable subscription a streaming query creates for itself."""


def check_names(opts: Mapping[str, str], names: tuple[str, ...], prefixes: tuple[str, ...], what: str) -> None:
    """ValueError for an option (any case) that is neither in ``names`` nor under one of
    ``prefixes``, naming the close ones."""
    by_lower = {n.lower(): n for n in names}
    for key in opts:
        lowered = key.lower()
        if lowered in by_lower or any(lowered.startswith(p) for p in prefixes):
            continue
        close = difflib.get_close_matches(lowered, list(by_lower), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(by_lower[c] for c in close)}?" if close else ""
        raise ValueError(f"option {key}: not an option of the magnetar {what}{hint} (see sinks/spark/README.md)")


def _times(key: str, text: str | None) -> tuple[int | None, tuple[tuple[str, int], ...]]:
    """``startingTime`` / ``endingTime``: milliseconds since the epoch, or a JSON object of topic
    (or partition) -> milliseconds, as pulsar-spark takes them."""
    if text is None or not str(text).strip():
        return None, ()
    text = str(text).strip()
    if text.startswith("{"):
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"option {key}: not valid JSON: {exc}") from None
        out = []
        for topic, ms in raw.items():
            if isinstance(ms, bool) or not isinstance(ms, int):
                raise ValueError(f"option {key}: {topic}: milliseconds since the epoch, not {ms!r}")
            out.append((str(topic), ms))
        return None, tuple(sorted(out))
    try:
        return int(text), ()
    except ValueError:
        raise ValueError(
            f"option {key}: milliseconds since the epoch or a JSON object of topic -> milliseconds, not {text!r}"
        ) from None


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
    given = {k[len("bookkeeper.") :]: v for k, v in opts.items() if k.startswith("bookkeeper.")}
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
    """Options of ``spark.readStream.format("magnetar")`` / ``spark.read.format("magnetar")``.

    The durable subscription (streaming only): ``subscription_mode`` is ``auto`` (default: one per
    query, named ``{subscription_prefix}-{random}`` when the query first starts and kept in its
    checkpoint), ``named`` (``subscriptionName`` / ``predefinedSubscription``) or ``off``
    (``durableSubscription=false``: nothing protects unread data from retention)."""

    service_url: str
    admin_url: str
    topics: tuple[str, ...] = ()
    topics_pattern: str = ""
    starting_offsets: str = "latest"
    ending_offsets: str = "latest"
    starting_time: int | None = None
    starting_times: tuple[tuple[str, int], ...] = ()
    ending_time: int | None = None
    ending_times: tuple[tuple[str, int], ...] = ()
    fail_on_data_loss: bool = True
    max_entries_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    subscription_mode: str = "auto"
    subscription_name: str = ""
    subscription_prefix: str = AUTO_PREFIX
    pipeline_name: str = ""
    read_mode: str = "broker"
    metadata_url: str = ""
    metadata_root: str = ""
    read_timeout_ms: int = 30_000
    max_entries_per_task: int | None = None
    decode_schema: bool = True
    allow_different_topic_schemas: bool = False
    wait_for_topics: bool = False
    ledger_password: str = ""
    security: ClientSecurity = ClientSecurity()
    admin_security: ClientSecurity = ClientSecurity()
    admin_timeout_s: float = 30.0
    client_kwargs: tuple[tuple[str, Any], ...] = ()
    reader_kwargs: tuple[tuple[str, Any], ...] = ()
    bookkeeper_options: tuple[tuple[str, str], ...] = ()
    zk_credentials: str = ""
    offload_credentials: tuple[str, str] = ("", "")

    @classmethod
    def parse(cls, options: Mapping[str, str], *, batch: bool = False) -> SourceOptions:
        """Check and parse; raises ValueError naming the offending option."""
        opts = {k.lower(): v for k, v in options.items()}
        if any(k.startswith("pulsar.producer.") for k in opts):
            raise ValueError("options pulsar.producer.* apply to the sink, not the source")
        check_names(
            options, SOURCE_OPTIONS, ("pulsar.client.", "pulsar.reader.", "pulsar.admin.", "bookkeeper."), "source"
        )
        service_url = opts.get("service.url", "")
        admin_url = opts.get("admin.url", "")
        if not admin_url:
            raise ValueError("option admin.url is required (the broker's admin REST, e.g. http://127.0.0.1:8080)")
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
            if given[0] == "topic" and "," in opts["topic"]:
                raise ValueError('option topic names one topic: use "topics" for several')
            topics = tuple(t.strip() for t in opts[given[0]].split(",") if t.strip())
        named = opts.get("subscriptionname") or opts.get("predefinedsubscription") or ""
        if (
            opts.get("subscriptionname")
            and opts.get("predefinedsubscription")
            and opts["subscriptionname"] != opts["predefinedsubscription"]
        ):
            raise ValueError("options subscriptionName and predefinedSubscription name the same thing: set one")
        if named == DEDUP_CURSOR:
            raise ValueError(
                f"option subscriptionName: {DEDUP_CURSOR!r} is the broker's deduplication "
                "cursor, not a subscription; choose another name"
            )
        durable = parse_bool("durableSubscription", opts.get("durablesubscription", "true"))
        if not durable and named:
            raise ValueError("option durableSubscription=false contradicts subscriptionName")
        mode = "named" if named else ("auto" if durable else "off")
        read_mode = opts.get("readmode", "broker").lower()
        if read_mode not in ("broker", "bookies"):
            raise ValueError(f"option readMode: broker or bookies, not {read_mode!r}")
        if read_mode == "bookies" and not opts.get("metadata.url"):
            raise ValueError("option readMode=bookies needs metadata.url (a zk:// URL the executors can reach)")
        if opts.get("startingoffsets") and opts.get("startingtime"):
            raise ValueError("set startingOffsets or startingTime, not both")
        if opts.get("endingoffsets") and opts.get("endingtime"):
            raise ValueError("set endingOffsets or endingTime, not both")
        if not batch and (opts.get("endingoffsets") or opts.get("endingtime")):
            raise ValueError("endingOffsets and endingTime apply to batch reads (spark.read), not streams")
        starting_time, starting_times = _times("startingTime", opts.get("startingtime"))
        ending_time, ending_times = _times("endingTime", opts.get("endingtime"))
        timeout = opts.get("readtimeoutms") or opts.get("polltimeoutms")
        security = ClientSecurity.parse(opts)
        admin_given = any(
            k.startswith("pulsar.admin.")
            and k[len("pulsar.admin.") :] not in ("requesttimeoutms", "connectiontimeoutms")
            for k in opts
        )
        return cls(
            service_url=service_url,
            admin_url=admin_url,
            topics=topics,
            topics_pattern=pattern,
            starting_offsets=opts.get("startingoffsets", "earliest" if batch else "latest"),
            ending_offsets=opts.get("endingoffsets", "latest"),
            starting_time=starting_time,
            starting_times=starting_times,
            ending_time=ending_time,
            ending_times=ending_times,
            fail_on_data_loss=parse_bool("failOnDataLoss", opts.get("failondataloss", "true")),
            max_entries_per_trigger=_positive("maxEntriesPerTrigger", opts.get("maxentriespertrigger")),
            max_bytes_per_trigger=_positive("maxBytesPerTrigger", opts.get("maxbytespertrigger")),
            subscription_mode=mode,
            subscription_name=named,
            subscription_prefix=opts.get("subscriptionprefix") or AUTO_PREFIX,
            pipeline_name=opts.get("pipelinename", ""),
            read_mode=read_mode,
            metadata_url=opts.get("metadata.url", ""),
            metadata_root=opts.get("metadata.root", ""),
            read_timeout_ms=_positive("readTimeoutMs", timeout) or 30_000,
            max_entries_per_task=_positive("maxEntriesPerTask", opts.get("maxentriespertask")),
            decode_schema=parse_bool("decodeSchema", opts.get("decodeschema", "true")),
            allow_different_topic_schemas=parse_bool(
                "allowDifferentTopicSchemas", opts.get("allowdifferenttopicschemas", "false")
            ),
            wait_for_topics=parse_bool("waitingForNonExistedTopic", opts.get("waitingfornonexistedtopic", "false")),
            ledger_password=opts.get("managedledgerpassword", ""),
            security=security,
            # pulsar-spark: the admin uses the client's credentials unless pulsar.admin.* gives its own
            admin_security=ClientSecurity.parse(opts, "pulsar.admin.") if admin_given else security,
            admin_timeout_s=admin_timeout(opts) or 30.0,
            client_kwargs=client_kwargs(opts),
            reader_kwargs=reader_kwargs(opts),
            bookkeeper_options=_bookkeeper_options(opts),
            zk_credentials=_zk_credentials(opts),
            # readMode=bookies reads offloaded ledgers from the tier itself: S3 credentials when the
            # executors have none of their own (AWS_ACCESS_KEY_ID, ~/.aws, an instance role)
            offload_credentials=(
                opts.get("s3managedledgeroffloadcredentialid", ""),
                opts.get("s3managedledgeroffloadcredentialsecret", ""),
            ),
        )

    def read_config(self) -> ReadConfig:
        """What executors need to read."""
        return ReadConfig(
            self.service_url,
            self.read_mode,
            self.metadata_url,
            self.metadata_root,
            self.fail_on_data_loss,
            self.read_timeout_ms,
            ledger_password=self.ledger_password,
            security=self.security,
            bookkeeper_options=self.bookkeeper_options,
            zk_credentials=self.zk_credentials,
            client_kwargs=self.client_kwargs,
            reader_kwargs=self.reader_kwargs,
            offload_credentials=self.offload_credentials,
        )

    def source_description(self) -> str:
        """What the source reads, as its options say (for the subscription's ``pipeline`` property)."""
        if self.topics_pattern:
            return f"topicsPattern={self.topics_pattern}"
        return f"topic={self.topics[0]}" if len(self.topics) == 1 else f"topics={','.join(self.topics)}"


@dataclass(frozen=True)
class SinkOptions:
    """Options of ``df.writeStream.format("magnetar")`` and ``df.write.format("magnetar")``."""

    service_url: str
    topic: str = ""  # "": every row names its topic in a __topic column
    admin_url: str = ""
    enable_deduplication: bool = True
    producer_name_prefix: str = "spark"
    value_schema: str = "avro"  # how a struct value is encoded: avro or json
    fail_once_after_rows: int | None = None
    security: ClientSecurity = ClientSecurity()
    admin_security: ClientSecurity = ClientSecurity()
    client_kwargs: tuple[tuple[str, Any], ...] = ()
    producer_kwargs: tuple[tuple[str, Any], ...] = ()
    hashing_scheme: str = "JavaStringHash"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Check and parse; raises ValueError naming the offending option."""
        opts = {k.lower(): v for k, v in options.items()}
        check_names(options, SINK_OPTIONS, ("pulsar.client.", "pulsar.producer.", "pulsar.admin."), "sink")
        if not opts.get("service.url"):
            raise ValueError("option service.url is required (e.g. pulsar://127.0.0.1:6650)")
        if opts.get("topics") or opts.get("topicspattern"):
            raise ValueError("the sink writes to one topic option, or to the __topic column of each row")
        value_schema = opts.get("valueschema", "avro").lower()
        if value_schema not in ("avro", "json"):
            raise ValueError(f"option valueSchema: avro or json, not {value_schema!r}")
        security = ClientSecurity.parse(opts)
        admin_given = any(k.startswith("pulsar.admin.") for k in opts)
        if admin_given:
            admin_timeout(opts)  # refuses what the admin REST cannot apply
        return cls(
            service_url=opts["service.url"],
            topic=opts.get("topic", "").strip(),
            admin_url=opts.get("admin.url", ""),
            enable_deduplication=parse_bool("enableDeduplication", opts.get("enablededuplication", "true")),
            producer_name_prefix=opts.get("producernameprefix", "spark"),
            value_schema=value_schema,
            fail_once_after_rows=_positive("failOnceAfterRows", opts.get("failonceafterrows")),
            security=security,
            admin_security=ClientSecurity.parse(opts, "pulsar.admin.") if admin_given else security,
            client_kwargs=client_kwargs(opts),
            producer_kwargs=producer_kwargs(opts),
            hashing_scheme=hashing_scheme(opts),
        )
