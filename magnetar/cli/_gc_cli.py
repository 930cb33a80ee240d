"""``magnetar bookie gc-explain``: why each entry log of a bookie is still on disk.

Asks a running bookie's ``GET /api/v1/bookie/gc/explain`` and prints one row per entry log (size,
usage, reason, the ledgers pinning it and where they belong) as a rich table, or the raw JSON
with ``--json``. `gc_explain` is a subcommand of the ``magnetar bookie`` group (cmd_bookie).
"""

from __future__ import annotations

import json
from typing import Any

import click

from . import _human as human

__all__ = ["gc_explain", "render_explain"]


def _pins(entry: dict[str, Any]) -> str:
    parts = []
    for pin in entry.get("ledgers", []):
        where = pin.get("belongs_to") or ("metadata deleted" if pin.get("metadata") == "absent" else "")
        parts.append(f"{pin['ledger_id']} ({human.size(pin['bytes'])}{', ' + where if where else ''})")
    if entry.get("other_ledgers"):
        parts.append(f"+{entry['other_ledgers']} more")
    return "\n".join(parts)


def render_explain(doc: dict[str, Any], console: Any) -> None:
    """Print an explain document (``GcExplanation.to_json``) on a rich console as a table."""
    from rich.text import Text

    sched = doc.get("schedule", {})
    table = human.new_table(
        "Entry logs and why their space is not reclaimed yet", ["log", "size", "usage", "reason", "detail", "pinned by"]
    )
    for e in doc.get("logs", []):
        table.add_row(
            *(
                Text(v)
                for v in (
                    e.get("log_file", str(e["log_id"])),
                    human.size(e["size_bytes"]),
                    f"{e['usage']:.1%}",
                    e["reason"],
                    e["detail"],
                    _pins(e),
                )
            )
        )
    console.print(table)
    last = doc.get("last_result")
    console.print(
        f"thresholds: minor {sched.get('minor_threshold')} major {sched.get('major_threshold')}; "
        f"last run: {human.ago(doc.get('last_run_ms'))}{': ' + last if last else ''}",
        markup=False,
        highlight=False,
    )


@click.command("gc-explain")
@click.option("--http-url", required=True, help="The bookie's HTTP base URL, e.g. http://127.0.0.1:8000.")
@click.option("--json", "as_json", is_flag=True, help="Print the raw JSON instead of a table.")
@click.option("--no-metadata", is_flag=True, help="Do not look up the pinning ledgers' metadata.")
@click.option("--max-ledgers", type=int, default=20, show_default=True, help="Ledgers listed per log.")
def gc_explain(http_url: str, as_json: bool, no_metadata: bool, max_ledgers: int) -> None:
    """Explain, for every entry log of a bookie, why its space has not been given back."""
    import httpx

    url = http_url.rstrip("/") + "/api/v1/bookie/gc/explain"
    params = {"metadata": "false" if no_metadata else "true", "max_ledgers": str(max_ledgers)}
    try:
        resp = httpx.get(url, params=params, timeout=30)
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach {url}: {exc}") from None
    if resp.status_code != 200:
        raise click.ClickException(f"{url} answered {resp.status_code}: {resp.text}")
    doc = resp.json()
    if as_json:
        click.echo(json.dumps(doc, indent=2))
        return
    render_explain(doc, human.console())
