"""A bookie's cookie: the identity of its directories, checked at every start.

Stored form: BookKeeper's (``Cookie.toString``, layout version 5): the line ``5`` then the
``CookieFormat`` message in protobuf text format, one ``field: "value"`` line per field::

    5
    bookieHost: "127.0.0.1:3181"
    journalDir: "/data/journal"
    ledgerDirs: "1\t/data/ledgers"
    instanceId: "6f0c..."

so that BookKeeper's tools and bookies read a Magnetar bookie's cookie and the reverse. A bookie
writes the same cookie into its journal and ledger directories and into the metadata store
(``cookie_path``) when it is formatted; at start it refuses to run unless all copies match, so
it never serves from the wrong directories or joins the wrong cluster. ``decode`` also reads
BookKeeper's layout-3 text (four lines) and the form earlier Magnetar versions wrote (the line
``MagnetarCookieVersion\t1`` then the binary message); ``is_current`` tells them apart.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from .._utf8 import invalid_utf8_field
from . import ledger_metadata_pb2 as pb

__all__ = ["Cookie", "CookieFormatError"]

_LEGACY_HEADER = b"MagnetarCookieVersion\t1\n"
COOKIE_LAYOUT_VERSION = 5
"""The cookie layout version BookKeeper 4.17 writes (protobuf text after the version line)."""


class CookieFormatError(Exception):
    """Bytes that are not a cookie Magnetar wrote."""


@dataclass(frozen=True, slots=True)
class Cookie:
    """Bookie id, journal directory, ledger directories and the cluster instance id."""

    bookie_id: str
    journal_dir: str
    ledger_dirs: tuple[str, ...]
    instance_id: str = ""

    def encode(self) -> bytes:
        """The stored form: BookKeeper's layout-5 cookie text (see the module docstring)."""
        # BookKeeper's ledgerDirs encoding: the count, then each dir, tab separated.
        dirs = "\t".join([str(len(self.ledger_dirs)), *self.ledger_dirs])
        fmt = pb.CookieFormat(bookieHost=self.bookie_id, journalDir=self.journal_dir, ledgerDirs=dirs)
        if self.instance_id:
            fmt.instanceId = self.instance_id
        return f"{COOKIE_LAYOUT_VERSION}\n{text_format.MessageToString(fmt)}".encode()

    @staticmethod
    def is_current(data: bytes) -> bool:
        """True when ``data`` is in the form ``encode`` writes (not an older one)."""
        return bytes(data).startswith(f"{COOKIE_LAYOUT_VERSION}\n".encode())

    @classmethod
    def decode(cls, data: bytes) -> Cookie:
        """Parse a stored cookie in any of the forms of the module docstring;
        ``CookieFormatError`` on anything else."""
        data = bytes(data)
        if data.startswith(_LEGACY_HEADER):
            return cls._from_format(cls._binary(data[len(_LEGACY_HEADER) :]))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise CookieFormatError("cookie is neither text nor a Magnetar cookie") from None
        first, _, rest = text.partition("\n")
        version = first.strip()
        if not (version.isascii() and version.isdigit()):
            raise CookieFormatError(f"cookie layout version {version[:20]!r} is not a number")
        if int(version) == 3:  # bookie id, journal dir, ledger dirs on their own lines
            lines = rest.split("\n")
            if len(lines) < 3:
                raise CookieFormatError("layout-3 cookie lacks lines")
            return cls._from_format(pb.CookieFormat(bookieHost=lines[0], journalDir=lines[1], ledgerDirs=lines[2]))
        if int(version) < 4:
            raise CookieFormatError(f"cookie layout version {version} is too old")
        fmt = pb.CookieFormat()
        try:
            with warnings.catch_warnings():  # an invalid escape only warns in Python; Java's parser refuses it
                warnings.simplefilter("error", DeprecationWarning)
                text_format.Parse(rest, fmt, allow_unknown_field=True)
        except (text_format.ParseError, DeprecationWarning) as exc:
            raise CookieFormatError(f"cookie text unparsable: {exc}") from exc
        if not fmt.IsInitialized():
            missing = fmt.FindInitializationErrors()  # type: ignore[attr-defined]  # not in the stubs
            raise CookieFormatError(f"cookie lacks {missing}")
        return cls._from_format(fmt)

    @staticmethod
    def _binary(body: bytes) -> pb.CookieFormat:
        fmt = pb.CookieFormat()
        try:
            fmt.ParseFromString(body)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise CookieFormatError(f"cookie body unparsable: {exc}") from exc
        if not fmt.IsInitialized():  # upb does not enforce proto2 `required` on parse
            missing = fmt.FindInitializationErrors()  # type: ignore[attr-defined]  # not in the stubs
            raise CookieFormatError(f"cookie lacks {missing}")
        bad = invalid_utf8_field(fmt, body)  # nor UTF-8: the field would read as bytes (see _utf8)
        if bad is not None:
            raise CookieFormatError(f"cookie field {bad} is not UTF-8")
        return fmt

    @classmethod
    def _from_format(cls, fmt: pb.CookieFormat) -> Cookie:
        parts = fmt.ledgerDirs.split("\t")
        # isascii: str.isdigit() also accepts digits such as "²" that int() refuses
        if not (parts[0].isascii() and parts[0].isdigit()) or int(parts[0]) != len(parts) - 1:
            raise CookieFormatError(f"cookie ledger dirs {fmt.ledgerDirs!r} are malformed")
        return cls(fmt.bookieHost, fmt.journalDir, tuple(parts[1:]), fmt.instanceId)

    def mismatches(self, other: Cookie) -> list[str]:
        """The names of the fields that differ from ``other`` (empty when they match)."""
        return [
            name
            for name in ("bookie_id", "journal_dir", "ledger_dirs", "instance_id")
            if getattr(self, name) != getattr(other, name)
        ]
