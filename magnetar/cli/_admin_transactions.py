"""``magnetar admin transactions``: the transaction coordinators and their transactions, as
pulsar-admin's ``transactions`` commands name them (over ``/admin/v3/transactions``)."""

from __future__ import annotations

import click

from magnetar.common.durations import parse_duration

from ._admin_api import AdminApi, admin_command, emit
from ._help import HelpGroup

transactions = HelpGroup("transactions", help="Transaction coordinators and their transactions.")

__all__ = ["transactions"]

_BASE = "/admin/v3/transactions"
_coordinator_option = click.option(
    "--coordinator-id", "-c", "coordinator_id", type=int, default=None, help="Only this coordinator."
)


@admin_command(transactions, "coordinators-list")
def coordinators_list(api: AdminApi) -> None:
    """List the coordinators and the broker serving each."""
    api.show(f"{_BASE}/coordinators", columns=["id", "brokerServiceUrl"])


@admin_command(transactions, "coordinator-stats", _coordinator_option)
def coordinator_stats(api: AdminApi, coordinator_id: int | None) -> None:
    """Show a coordinator's stats (state, sequence, low water mark, open transactions, recovery),
    or those of every coordinator the broker serves."""
    params = {} if coordinator_id is None else {"coordinatorId": coordinator_id}
    emit(api, api.call("GET", f"{_BASE}/coordinatorStats", params=params), title="coordinator stats")


@admin_command(
    transactions,
    "transaction-metadata",
    click.option("--most-sig-bits", "-m", "most", type=int, required=True, help="The coordinator id."),
    click.option("--least-sig-bits", "-l", "least", type=int, required=True, help="The transaction's sequence."),
)
def transaction_metadata(api: AdminApi, most: int, least: int) -> None:
    """Show an open transaction: status, times, owner, the partitions it produced to and the
    subscriptions it acknowledged on."""
    api.show(f"{_BASE}/transactionMetadata/{most}/{least}", title=f"transaction ({most},{least})")


@admin_command(
    transactions,
    "slow-transactions",
    _coordinator_option,
    click.option("--time", "-t", "time_", required=True, help="Open longer than this (e.g. 30s, 5m, 1h)."),
)
def slow_transactions(api: AdminApi, coordinator_id: int | None, time_: str) -> None:
    """List the transactions open longer than --time."""
    try:
        timeout_ms = int(parse_duration(time_) * 1000)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--time") from None
    params = {} if coordinator_id is None else {"coordinatorId": coordinator_id}
    emit(api, api.call("GET", f"{_BASE}/slowTransactions/{timeout_ms}", params=params), title="slow transactions")


@admin_command(
    transactions,
    "coordinator-internal-stats",
    click.option("--coordinator-id", "-c", "coordinator_id", type=int, required=True, help="The coordinator."),
)
def coordinator_internal_stats(api: AdminApi, coordinator_id: int) -> None:
    """Show a coordinator's log: its managed ledger and that ledger's internal stats."""
    api.show(f"{_BASE}/coordinatorInternalStats/{coordinator_id}", title=f"coordinator {coordinator_id} log")
