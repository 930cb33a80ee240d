"""A bookie's registration data: BookKeeper's binary BookieServiceInfoFormat (endpoints and
properties), the empty data of old registrations and Magnetar's earlier JSON. The bytes a real
BookKeeper bookie writes are checked in tests/bk_interop."""

from __future__ import annotations

import json

import pytest

from protocols.bookkeeper import BOOKIE_RPC, BookieServiceInfo, Endpoint, RegistrationFormatError
from protocols.bookkeeper import ledger_metadata_pb2 as pb

INFO = BookieServiceInfo(
    (
        Endpoint("bookie", "10.0.0.7", 3181, BOOKIE_RPC, extensions=("tls",)),
        Endpoint("httpserver", "10.0.0.7", 8000, "http"),
    ),
    {"b": "2", "a": "1"},
)


def test_round_trip_and_queries() -> None:
    assert BookieServiceInfo.decode(INFO.encode()) == INFO
    assert INFO.rpc_address() == ("10.0.0.7", 3181)
    assert INFO.http_urls() == ["http://10.0.0.7:8000"]
    assert BookieServiceInfo.legacy("h:1").http_urls() == []


def test_wire_form_is_bookkeepers_message() -> None:
    # field numbers as BookKeeper's DataFormats.proto: endpoints = 6, properties (a map) = 7
    fmt = pb.BookieServiceInfoFormat.FromString(INFO.encode())
    assert [(e.id, e.host, e.port, e.protocol, list(e.extensions)) for e in fmt.endpoints] == [
        ("bookie", "10.0.0.7", 3181, "bookie-rpc", ["tls"]),
        ("httpserver", "10.0.0.7", 8000, "http", []),
    ]
    assert [(p.key, p.value) for p in fmt.properties] == [("a", "1"), ("b", "2")]  # sorted: stable bytes
    assert INFO.encode()[:1] == b"\x32"  # field 6, length-delimited


def test_empty_data_is_the_address_the_id_names() -> None:
    assert BookieServiceInfo.decode(b"", "127.0.0.1:3181").rpc_address() == ("127.0.0.1", 3181)
    assert BookieServiceInfo.decode(b"", "[::1]:3181").rpc_address() == ("::1", 3181)
    assert BookieServiceInfo.decode(b"", "custom-id").rpc_address() is None


def test_earlier_magnetar_json_is_read() -> None:
    doc = {"host": "b1", "port": 3181, "httpUrls": ["http://0.0.0.0:8000"], "bookieId": "b1:3181"}
    info = BookieServiceInfo.decode(json.dumps(doc).encode(), "b1:3181")
    assert info.rpc_address() == ("b1", 3181) and info.http_urls() == ["http://b1:8000"]
    only_http = BookieServiceInfo.decode(b'{"host": "b2", "httpUrls": ["http://h2:82"]}', "b2")
    assert only_http.rpc_address() is None and only_http.http_urls() == ["http://h2:82"]


@pytest.mark.parametrize("data", [b"\x32\x02\x0a", b"{not json", b'{"host": "h", "port": "x"}', b"[1]", b"\x32\x00"])
def test_garbage_is_refused(data: bytes) -> None:
    with pytest.raises(RegistrationFormatError):
        BookieServiceInfo.decode(data, "b:1")
