"""Generated ``set-X`` / ``get-X`` / ``remove-X`` commands of the count limits and rates that
namespaces and topics both have (pulsar-admin's names and flags). The group modules call these
on their own groups."""

from __future__ import annotations

from typing import Any

import click

from ._admin_api import AdminApi, admin_command

__all__ = ["limit_commands", "rate_commands"]


def limit_commands(group: click.Group, name: str, path: Any, arg: Any, flag: tuple[str, ...], what: str) -> None:
    """``set-X`` (an integer flag), ``get-X`` and ``remove-X`` of one count limit."""

    @admin_command(
        group, f"set-{name}", arg, click.option(*flag, "value", type=int, required=True, help=f"{what} (0: none).")
    )
    def set_(api: AdminApi, value: int, **target: str) -> None:
        (key,) = target.values()
        api.do("POST", path(key), f"set {name} of {key} to {value}", value)

    set_.help = f"Set the {what.lower()}."

    @admin_command(group, f"get-{name}", arg)
    def get(api: AdminApi, **target: str) -> None:
        (key,) = target.values()
        api.show(path(key))

    get.help = f"Show the {what.lower()}."

    @admin_command(group, f"remove-{name}", arg)
    def remove(api: AdminApi, **target: str) -> None:
        (key,) = target.values()
        api.do("DELETE", path(key), f"removed {name} of {key}")

    remove.help = f"Remove the {what.lower()} (the next level's applies)."


def rate_commands(group: click.Group, name: str, path: Any, arg: Any, kind: str) -> None:
    """``set-X``, ``get-X`` and ``remove-X`` of one rate (publish, dispatch or subscribe)."""
    opts: tuple[Any, ...]
    if kind == "publish":
        opts = (
            click.option("--msg-publish-rate", "-m", "msgs", type=int, default=-1, help="Messages per second."),
            click.option("--byte-publish-rate", "-b", "nbytes", type=int, default=-1, help="Bytes per second."),
        )
    elif kind == "subscribe":
        opts = (
            click.option(
                "--subscribe-rate", "-sr", "msgs", type=int, default=-1, help="Subscribes per consumer per period."
            ),
            click.option("--subscribe-rate-period", "-st", "period", type=int, default=30, help="Period in seconds."),
        )
    else:
        opts = (
            click.option("--msg-dispatch-rate", "-md", "msgs", type=int, default=-1, help="Messages per period."),
            click.option("--byte-dispatch-rate", "-bd", "nbytes", type=int, default=-1, help="Bytes per period."),
            click.option("--dispatch-rate-period", "-dt", "period", type=int, default=1, help="Period in seconds."),
        )

    @admin_command(group, f"set-{name}", arg, *opts)
    def set_(api: AdminApi, msgs: int, nbytes: int = -1, period: int = 1, **target: str) -> None:
        (key,) = target.values()
        if kind == "publish":
            body: dict[str, Any] = {"publishThrottlingRateInMsg": msgs, "publishThrottlingRateInByte": nbytes}
        elif kind == "subscribe":
            body = {"subscribeThrottlingRatePerConsumer": msgs, "ratePeriodInSecond": period}
        else:
            body = {
                "dispatchThrottlingRateInMsg": msgs,
                "dispatchThrottlingRateInByte": nbytes,
                "relativeToPublishRate": False,
                "ratePeriodInSecond": period,
            }
        api.do("POST", path(key), f"set {name} of {key}", body)

    set_.help = f"Set the {name.replace('-', ' ')}."

    @admin_command(group, f"get-{name}", arg)
    def get(api: AdminApi, **target: str) -> None:
        (key,) = target.values()
        api.show(path(key), title=name)

    get.help = f"Show the {name.replace('-', ' ')}."

    @admin_command(group, f"remove-{name}", arg)
    def remove(api: AdminApi, **target: str) -> None:
        (key,) = target.values()
        api.do("DELETE", path(key), f"removed {name} of {key}")

    remove.help = f"Remove the {name.replace('-', ' ')}."
