"""A bookie's cookie: the identity of its directories, checked at every start.

Stored form: the line ``MagnetarCookieVersion\\t1\\n`` then the binary ``CookieFormat``. A bookie
writes the same cookie into its journal and ledger directories and into the metadata store
(``cookie_path``) when it is formatted; at start it refuses to run unless all copies match, so
it never serves from the wrong directories or joins the wrong cluster.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError

from .._utf8 import invalid_utf8_field
from . import ledger_metadata_pb2 as pb

__all__ = ["Cookie", "CookieFormatError"]

_HEADER = b"MagnetarCookieVersion\t1\n"


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
        """The stored form (header line + protobuf)."""
        # BookKeeper's ledgerDirs encoding: the count, then each dir, tab separated.
        dirs = "\t".join([str(len(self.ledger_dirs)), *self.ledger_dirs])
        fmt = pb.CookieFormat(bookieHost=self.bookie_id, journalDir=self.journal_dir, ledgerDirs=dirs)
        if self.instance_id:
            fmt.instanceId = self.instance_id
        body: bytes = fmt.SerializeToString()
        return _HEADER + body

    @classmethod
    def decode(cls, data: bytes) -> Cookie:
        """Parse the stored form; ``CookieFormatError`` on anything else."""
        data = bytes(data)
        if not data.startswith(_HEADER):
            raise CookieFormatError("cookie header missing or of an unknown version")
        fmt = pb.CookieFormat()
        body = data[len(_HEADER) :]
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
        parts = fmt.ledgerDirs.split("\t")
        # isascii: str.isdigit() also accepts digits such as "²" that int() refuses
        if not (parts[0].isascii() and parts[0].isdigit()) or int(parts[0]) != len(parts) - 1:
            raise CookieFormatError(f"cookie ledger dirs {fmt.ledgerDirs!r} are malformed")
        return cls(fmt.bookieHost, fmt.journalDir, tuple(parts[1:]), fmt.instanceId)

    def mismatches(self, other: Cookie) -> list[str]:
        """The names of the fields that differ from ``other`` (empty when they match)."""
        return [name for name in ("bookie_id", "journal_dir", "ledger_dirs", "instance_id")
                if getattr(self, name) != getattr(other, name)]
