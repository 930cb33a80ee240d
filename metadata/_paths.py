"""Pure helpers over ZooKeeper-style paths (``/a/b/c``); no I/O."""

from __future__ import annotations

from ._errors import InvalidPathError

ROOT = "/"


def validate(path: str) -> str:
    """Return ``path`` if it is a valid absolute node path, else raise InvalidPathError.

    The rules are ZooKeeper's: absolute, no trailing slash (except the root), no empty, ``.`` or
    ``..`` components, no NUL character.
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidPathError(str(path), "must be a string starting with '/'")
    if path == ROOT:
        return path
    if path.endswith("/"):
        raise InvalidPathError(path, "must not end with '/'")
    if "\x00" in path:
        raise InvalidPathError(path, "must not contain NUL")
    for part in path[1:].split("/"):
        if part in ("", ".", ".."):
            raise InvalidPathError(path, "empty, '.' and '..' components are not allowed")
    return path


def parent(path: str) -> str:
    """The parent of a non-root path (``/a/b`` -> ``/a``, ``/a`` -> ``/``)."""
    head = path.rsplit("/", 1)[0]
    return head or ROOT


def name(path: str) -> str:
    """The last component of a path."""
    return path.rsplit("/", 1)[1]


def join(base: str, child: str) -> str:
    """``base`` + ``/`` + ``child`` without doubling the root slash."""
    return f"/{child}" if base == ROOT else f"{base}/{child}"


def ancestors(path: str) -> list[str]:
    """The proper ancestors of ``path`` from the top down, excluding the root."""
    out = []
    p = parent(path)
    while p != ROOT:
        out.append(p)
        p = parent(p)
    return out[::-1]


def sequential_name(path: str, counter: int) -> str:
    """The name ZooKeeper gives a sequential node: the path plus 10 zero-padded digits."""
    return f"{path}{counter:010d}"
