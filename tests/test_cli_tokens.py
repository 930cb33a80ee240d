"""``magnetar tokens``: keys and tokens the broker's token provider accepts."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from broker import BrokerConfig
from broker.auth import AuthenticationService
from magnetar.cli import main


def _run(*args: str, input: str | None = None) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["tokens", *args], input=input)
    return r.exit_code, r.output


def _service(**keys: str) -> AuthenticationService:
    return AuthenticationService(BrokerConfig(authentication_enabled=True, authentication_providers=("token",), **keys))  # type: ignore[arg-type]


def test_secret_key_create_show_validate(tmp_path: Path) -> None:
    key = tmp_path / "secret.key"
    assert _run("create-secret-key", "--output", str(key))[0] == 0
    assert len(key.read_bytes()) == 32
    code, out = _run("create", "--secret-key", f"file://{key}", "--subject", "alice", "--expiry-time", "1h")
    assert code == 0
    token = out.strip()
    assert _service(token_secret_key=f"file://{key}").authenticate("token", token.encode()).role == "alice"
    code, out = _run("show", token)
    header, claims = (json.loads(line) for line in out.splitlines())
    assert header["alg"] == "HS256" and claims["sub"] == "alice" and "exp" in claims
    code, out = _run("validate", "--secret-key", f"file://{key}", "--stdin", input=token)
    assert code == 0 and json.loads(out)["sub"] == "alice"
    other = tmp_path / "other.key"
    _run("create-secret-key", "--output", str(other))
    code, out = _run("validate", "--secret-key", f"file://{other}", token)
    assert code == 1 and "not valid" in out


def test_key_pairs_and_expired_token(tmp_path: Path) -> None:
    for alg in ("RS256", "ES256"):
        private, public = tmp_path / f"{alg}.private", tmp_path / f"{alg}.public"
        assert (
            _run(
                "create-key-pair", "-a", alg, "--output-private-key", str(private), "--output-public-key", str(public)
            )[0]
            == 0
        )
        code, out = _run("create", "--private-key", f"file://{private}", "--subject", "bob")
        assert code == 0
        token = out.strip()
        svc = _service(token_public_key=f"file://{public}", token_public_alg=alg)
        assert svc.authenticate("token", token.encode()).role == "bob"
        assert _run("validate", "-pk", f"file://{public}", "-a", alg, token)[0] == 0
    code, out = _run("create-secret-key", "--base64")
    key = "data:;base64," + out.strip()
    expired = _run("create", "-sk", key, "-s", "carol", "-e", "-5s")[1].strip()
    code, out = _run("validate", "-sk", key, expired)
    assert code == 1 and "expired" in out
    assert _run("create", "-s", "x")[0] == 2  # no key
