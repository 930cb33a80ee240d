"""What a bookie publishes in its registration node, as BookKeeper writes and reads it (pure).

A bookie registers the ephemeral node ``{root}/ledgers/available/{bookieId}`` (or
``.../available/readonly/{bookieId}``); its data is the binary ``BookieServiceInfoFormat``
protobuf: a list of endpoints and a map of properties. A BookKeeper client connects to the
endpoint whose protocol is ``bookie-rpc`` (BookKeeper's ``DefaultBookieAddressResolver``), so
the bookie id need not be an address; data that does not parse makes that client give up on the
bookie. Rules:

1. ``encode`` writes the protobuf with the endpoints in order and the properties sorted by key
   (equal values encode to equal bytes).
2. ``decode`` reads it back. Empty data (a registration made before bookies published their
   service info) is, as in BookKeeper, one ``bookie-rpc`` endpoint at the address the id names.
   The JSON document earlier Magnetar bookies wrote (``{"host", "port", "httpUrls"}``) is read
   too, so a client or broker can follow a cluster during a rolling upgrade.
3. Anything else raises ``RegistrationFormatError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import urlsplit

from google.protobuf.message import DecodeError, EncodeError

from .._utf8 import invalid_utf8_field
from . import ledger_metadata_pb2 as pb

__all__ = ["BOOKIE_RPC", "BookieServiceInfo", "Endpoint", "RegistrationFormatError"]

BOOKIE_RPC = "bookie-rpc"
"""The endpoint protocol of the bookie protocol (BookKeeper's name)."""


class RegistrationFormatError(ValueError):
    """Registration data that is neither BookKeeper's service info nor Magnetar's earlier JSON."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One published endpoint: ``id`` names it ("bookie", "httpserver"), ``protocol`` says how to
    talk to it ("bookie-rpc", "http", "https"); ``extensions`` lists options such as "tls"."""

    id: str
    host: str
    port: int
    protocol: str
    auth: tuple[str, ...] = ()
    extensions: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        """``protocol://host:port`` (IPv6 hosts bracketed), the form of an HTTP endpoint's URL."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol}://{host}:{self.port}"


def _split_id(bookie_id: str) -> tuple[str, int] | None:
    host, sep, port = bookie_id.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit()):
        return None
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class BookieServiceInfo:
    """A bookie's published endpoints and properties (see the module rules)."""

    endpoints: tuple[Endpoint, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "endpoints", tuple(self.endpoints))
        object.__setattr__(self, "properties", MappingProxyType(dict(self.properties)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BookieServiceInfo):
            return NotImplemented
        return self.endpoints == other.endpoints and dict(self.properties) == dict(other.properties)

    def __hash__(self) -> int:
        return hash((self.endpoints, tuple(sorted(self.properties.items()))))

    def endpoint(self, protocol: str) -> Endpoint | None:
        """The first endpoint speaking ``protocol``, or None."""
        return next((e for e in self.endpoints if e.protocol == protocol), None)

    def rpc_address(self) -> tuple[str, int] | None:
        """Host and port of the ``bookie-rpc`` endpoint, or None when there is none."""
        e = self.endpoint(BOOKIE_RPC)
        return None if e is None else (e.host, e.port)

    def http_urls(self) -> list[str]:
        """The URLs of the HTTP(S) endpoints, in order."""
        return [e.url for e in self.endpoints if e.protocol in ("http", "https")]

    @classmethod
    def legacy(cls, bookie_id: str) -> BookieServiceInfo:
        """What BookKeeper assumes for a registration without data: one ``bookie-rpc`` endpoint at
        the address the id names (none when the id is not ``host:port``)."""
        parts = _split_id(bookie_id)
        if parts is None:
            return cls()
        return cls((Endpoint("bookie", parts[0], parts[1], BOOKIE_RPC),))

    def encode(self) -> bytes:
        """The registration node's data (rule 1)."""
        fmt = pb.BookieServiceInfoFormat()
        for e in self.endpoints:
            fmt.endpoints.add(
                id=e.id, host=e.host, port=e.port, protocol=e.protocol, auth=list(e.auth), extensions=list(e.extensions)
            )
        for key in sorted(self.properties):
            fmt.properties.add(key=key, value=self.properties[key])
        try:
            return fmt.SerializeToString()
        except (EncodeError, ValueError) as exc:  # a port outside int32
            raise RegistrationFormatError(f"cannot encode the service info: {exc}") from exc

    @classmethod
    def decode(cls, data: bytes, bookie_id: str = "") -> BookieServiceInfo:
        """Parse a registration node's data (rules 2 and 3); ``bookie_id`` names the node, for
        data-less registrations."""
        data = bytes(data)
        if not data:
            return cls.legacy(bookie_id)
        if data[:1] == b"{":  # Magnetar's earlier JSON; a protobuf never starts with 0x7b (field 15, group)
            return cls._from_json(data)
        fmt = pb.BookieServiceInfoFormat()
        try:
            fmt.ParseFromString(data)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise RegistrationFormatError(f"bookie service info unparsable: {exc}") from exc
        if not fmt.IsInitialized():
            missing = fmt.FindInitializationErrors()  # type: ignore[attr-defined]  # not in the stubs
            raise RegistrationFormatError(f"bookie service info lacks {missing}")
        bad = invalid_utf8_field(fmt, data)
        if bad is not None:
            raise RegistrationFormatError(f"bookie service info field {bad} is not UTF-8")
        return cls(
            tuple(
                Endpoint(e.id, e.host, e.port, e.protocol, tuple(e.auth), tuple(e.extensions)) for e in fmt.endpoints
            ),
            {p.key: p.value for p in fmt.properties},
        )

    @classmethod
    def _from_json(cls, data: bytes) -> BookieServiceInfo:
        try:
            doc = json.loads(data)
            host = str(doc.get("host") or "")
            port = doc.get("port")
            urls = [str(u) for u in doc.get("httpUrls") or []]
            endpoints = [Endpoint("bookie", host, int(port), BOOKIE_RPC)] if host and port is not None else []
        except (ValueError, TypeError, AttributeError) as exc:
            raise RegistrationFormatError(f"registration JSON unreadable: {exc}") from exc
        for i, url in enumerate(urls):
            parts = urlsplit(url)
            if parts.hostname is None or parts.port is None:
                continue
            # a server bound to every address: reach it at the bookie's advertised host
            hostname = host if host and parts.hostname in ("0.0.0.0", "::") else parts.hostname
            endpoints.append(
                Endpoint("httpserver" if i == 0 else f"httpserver-{i}", hostname, parts.port, parts.scheme)
            )
        return cls(tuple(endpoints))
