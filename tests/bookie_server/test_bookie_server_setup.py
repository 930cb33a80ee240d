"""Config validation, cookies, registration, disk checks and the CLI's config loading."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from click.testing import CliRunner

from bookie import (
    BookieConfig,
    BookieState,
    CookieMismatchError,
    DiskUsage,
    DiskVerdict,
    check_cookies,
    classify_disk_usage,
    format_bookie,
    open_bookie,
    registration_path,
    run_disk_checker,
    run_registration,
)
from magnetar.cli import main as cli
from magnetar.common.config import ConfigError, load_config
from metadata import open_metadata_store
from protocols.bookkeeper import Cookie, cookie_path
from tests.support.bookie_server import make_config


@pytest.mark.parametrize(
    ("values", "key"),
    [
        ({"diskUsageLwmThreshold": 0.97}, "disk_usage_lwm_threshold"),
        ({"diskUsageWarnThreshold": 0.99}, "disk_usage_warn_threshold"),
        ({"diskUsageThreshold": 1.5}, "disk_usage_threshold"),
        ({"bookiePort": 70000}, "port"),
        ({"bookiePort": "3181"}, "bookiePort"),
        ({"ledgerDirectories": []}, "ledger_dirs"),
        ({"journalMaxSizeMB": 0}, "journal_max_size_mb"),
        ({"logSizeLimit": 10}, "log_size_limit"),
        ({"metadataServiceUri": "localhost"}, "metadata_url"),
        ({"nosuchKey": 1}, "nosuchKey"),
    ],
)
def test_config_errors_name_the_key(values: dict, key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(BookieConfig, values)
    assert err.value.key == key


def test_config_aliases_and_journal_units() -> None:
    cfg = load_config(
        BookieConfig,
        {
            "bookiePort": 3999,
            "journalMaxSizeMB": 64,
            "journalSyncData": False,
            "ledgerDirectories": ["/a", "/b"],
            "advertisedAddress": "h",
        },
    )
    assert cfg.effective_bookie_id == "h:3999"
    jc = cfg.journal_config()
    assert jc.max_file_size == 64 * 1024 * 1024 and jc.sync_data is False
    assert cfg.ledger_dirs == ("/a", "/b")


def test_deploy_bookie_toml_loads() -> None:
    from magnetar.common.config import read_toml

    path = Path(__file__).resolve().parents[2] / "deploy" / "bookie.toml"
    cfg = load_config(BookieConfig, read_toml(path))
    assert cfg == BookieConfig()


async def test_cookies_are_written_for_a_new_bookie_and_checked(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, bookie_id="b1")
    async with open_metadata_store(f"memory://cookies-{id(tmp_path)}") as store:
        first = await check_cookies(cfg, store)
        assert (await check_cookies(cfg, store)) == first
        raw, _ = await store.get(cookie_path("", "b1"))
        assert Cookie.decode(raw) == first
        # the same directories under another id: refused, naming the difference
        other = make_config(tmp_path, bookie_id="b2")
        with pytest.raises(CookieMismatchError) as err:
            await check_cookies(other, store)
        assert "bookie_id" in str(err.value) and "b1" in str(err.value)
        # another ledger directory list: refused
        moved = make_config(tmp_path, bookie_id="b1", ledger_dirs=(str(tmp_path / "ledgers"), str(tmp_path / "l2")))
        with pytest.raises(CookieMismatchError):
            await check_cookies(moved, store)
        # the metadata cookie is there but the directories are new (wiped disk): refused
        fresh = make_config(tmp_path / "fresh", bookie_id="b1")
        with pytest.raises(CookieMismatchError) as err:
            await check_cookies(fresh, store)
        assert "has no cookie" in str(err.value) or "differs" in str(err.value)


async def test_data_without_cookie_is_refused_and_format_resets(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, bookie_id="b1")
    async with open_bookie(cfg):
        pass  # leaves journal and index files behind, no cookie
    with pytest.raises(CookieMismatchError) as err:
        await check_cookies(cfg, None)
    assert "holds data but has no cookie" in str(err.value)
    with pytest.raises(CookieMismatchError):
        await format_bookie(cfg, None)
    cookie = await format_bookie(cfg, None, force=True)
    assert await check_cookies(cfg, None) == cookie


async def test_registration_follows_the_state(tmp_path: Path) -> None:
    cfg = make_config(tmp_path, bookie_id="bk-reg")
    async with open_metadata_store(f"memory://reg-{id(tmp_path)}") as store, open_bookie(cfg) as bookie:
        writable = registration_path("", "bk-reg", BookieState.WRITABLE)
        readonly = registration_path("", "bk-reg", BookieState.READ_ONLY)
        async with trio.open_nursery() as nursery:
            await nursery.start(run_registration, bookie, store)
            stat = await store.exists(writable)
            assert stat is not None and stat.ephemeral_owner == store.session_id
            bookie.set_manual_read_only(True)
            with trio.fail_after(5):
                while await store.exists(readonly) is None:
                    await trio.sleep(0.01)
            assert await store.exists(writable) is None
            bookie.set_manual_read_only(False)
            with trio.fail_after(5):
                while await store.exists(writable) is None:
                    await trio.sleep(0.01)
            assert await store.exists(readonly) is None
            nursery.cancel_scope.cancel()
        assert await store.exists(writable) is None


def test_disk_usage_rule_has_hysteresis() -> None:
    def u(frac: float) -> DiskUsage:
        return DiskUsage("/d", 1000, int(1000 * (1 - frac)))

    assert classify_disk_usage([u(0.5), u(0.96)], 0.95, 0.90) is DiskVerdict.FULL
    assert classify_disk_usage([u(0.5), u(0.92)], 0.95, 0.90) is DiskVerdict.UNCHANGED
    assert classify_disk_usage([u(0.5), u(0.89)], 0.95, 0.90) is DiskVerdict.CLEAR


async def test_disk_checker_turns_read_only_and_back(tmp_path: Path) -> None:
    usage = {"frac": 0.5}

    def measure(paths: list[str]) -> list[DiskUsage]:
        return [DiskUsage(p, 1000, int(1000 * (1 - usage["frac"]))) for p in paths]

    async with open_bookie(make_config(tmp_path, disk_check_interval_ms=10)) as bookie:
        async with trio.open_nursery() as nursery:
            await nursery.start(lambda task_status: run_disk_checker(bookie, measure=measure, task_status=task_status))
            with trio.fail_after(5):
                usage["frac"] = 0.97
                while bookie.state is BookieState.WRITABLE:
                    await trio.sleep(0.01)
                usage["frac"] = 0.92  # between the LWM and the threshold: stays read-only
                await trio.sleep(0.1)  # ten disk checks (10 ms) in which it must not turn writable
                assert bookie.state is BookieState.READ_ONLY
                usage["frac"] = 0.5
                while bookie.state is BookieState.READ_ONLY:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()


def test_cli_format_and_config_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    args = [
        "--journal-dir",
        str(tmp_path / "j"),
        "--ledger-dirs",
        f"{tmp_path / 'l1'},{tmp_path / 'l2'}",
        "--bookie-id",
        "cli-b",
    ]
    result = runner.invoke(cli, ["bookie", "format", *args])
    assert result.exit_code == 0, result.output
    assert "formatted bookie cli-b" in result.output
    assert (tmp_path / "l2" / "VERSION").exists()
    result = runner.invoke(cli, ["bookie", "format", *args])
    assert result.exit_code == 3 and "already has a cookie" in result.output  # could not start
    conf = tmp_path / "bookie.toml"
    conf.write_text("diskUsageThreshold = 0.5\ndiskUsageWarnThreshold = 0.9\n")
    result = runner.invoke(cli, ["bookie", "--conf", str(conf), *args])
    assert result.exit_code == 2 and "disk_usage_warn_threshold" in result.output


@pytest.mark.slow
@pytest.mark.zk
async def test_whole_bookie_process_registers_in_zookeeper(tmp_path: Path, zk_url: str) -> None:
    from bookie import BookieEndpoints, serve_bookie_process
    from protocols.bookkeeper import add_request, available_path
    from tests.support.bookie_server import KEY, Client, entry

    cfg = make_config(tmp_path, metadata_url=zk_url, bookie_id="zk-bookie")
    async with open_metadata_store(zk_url) as observer:
        async with trio.open_nursery() as nursery:
            endpoints: BookieEndpoints = await nursery.start(serve_bookie_process, cfg)
            assert await observer.children(available_path("")) == ["readonly", "zk-bookie"]
            c = await Client.connect(endpoints.port)
            assert (await c.call(add_request(1, 1, 0, KEY, entry(1, 0, b"zk")))).status == 0
            await c.aclose()
            assert endpoints.http_urls
            nursery.cancel_scope.cancel()
        assert await observer.children(available_path("")) == ["readonly"]
        assert await observer.exists("/ledgers/cookies/zk-bookie") is not None
