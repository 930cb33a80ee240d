"""BookKeeper's Java pieces for the interoperability tests (built once per run)."""

from tests.support.bookkeeper_java import bk_java as bk_java
