"""Token authentication on the Pulsar protocol, with the official client's AuthenticationToken."""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Iterator

import jwt
import pulsar
import pytest

from broker import BrokerConfig
from broker.auth import AuthenticationError, AuthenticationService, create_token, new_key_pair, new_secret_key
from magnetar.common.config import ConfigError
from protocols.pulsar import pulsar_api_pb2 as pb
from tests.support.broker_thread import BrokerThread
from tests.support.raw_pulsar import RawPeer

SECRET = new_secret_key()


def _config(**extra: object) -> BrokerConfig:
    keys: dict[str, object] = dict(
        advertised_address="127.0.0.1",
        bind_address="127.0.0.1",
        broker_service_port=0,
        web_service_port=0,
        authentication_enabled=True,
        authentication_providers=("token",),
        token_secret_key="data:;base64," + base64.b64encode(SECRET).decode(),
    )
    keys.update(extra)
    return BrokerConfig(**keys)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def secured() -> Iterator[BrokerThread]:
    with BrokerThread(_config(authentication_refresh_check_s=1)) as b:
        yield b


def _client(url: str, token: object = None, timeout_s: int = 5) -> pulsar.Client:
    auth = pulsar.AuthenticationToken(token) if token is not None else None
    return pulsar.Client(
        url,
        authentication=auth,
        operation_timeout_seconds=timeout_s,
        connection_timeout_ms=5000,
        logger=logging.getLogger("pulsar-client"),
    )


def test_valid_token_produces_and_consumes(secured: BrokerThread) -> None:
    c = _client(secured.url, create_token("alice", secret_key=SECRET, expires_in_s=3600))
    try:
        topic = "persistent://public/default/auth-valid"
        consumer = c.subscribe(topic, "s")
        producer = c.create_producer(topic)
        producer.send(b"hello")
        assert consumer.receive(5000).data() == b"hello"
    finally:
        c.close()
    roles = {conn.auth_session.role for conn in secured.service.connections if conn.auth_session.role}  # type: ignore[union-attr]
    assert roles <= {"alice"}


@pytest.mark.parametrize(
    "token",
    [
        pytest.param(create_token("alice", secret_key=SECRET, expires_in_s=-10), id="expired"),
        pytest.param(create_token("alice", secret_key=new_secret_key()), id="forged"),
        pytest.param("not-a-jwt", id="garbage"),
        pytest.param(None, id="missing"),
    ],
)
def test_bad_credentials_are_refused(secured: BrokerThread, token: str | None) -> None:
    # the official client retries a refused connection until its operation timeout
    c = _client(secured.url, token, timeout_s=2)
    try:
        with pytest.raises(pulsar.PulsarException):
            c.create_producer("persistent://public/default/auth-refused")
    finally:
        c.close()
    # on the wire: ERROR AuthenticationError (request id -1), then the broker closes
    peer = RawPeer(secured.port)
    try:
        fields: dict[str, object] = {"client_version": "raw", "protocol_version": 20}
        if token is not None:
            fields.update(auth_method_name="token", auth_data=token.encode())
        peer.send("CONNECT", **fields)
        answers = peer.recv_until_closed()
    finally:
        peer.close()
    assert [a.type for a in answers] == [pb.BaseCommand.ERROR]
    assert answers[0].error.error == pb.AuthenticationError
    assert answers[0].error.request_id == 2**64 - 1


def test_expiring_token_is_refreshed_on_an_open_connection(secured: BrokerThread) -> None:
    issued: list[str] = []

    def supplier() -> str:
        issued.append(create_token("bob", secret_key=SECRET, expires_in_s=2))
        return issued[-1]

    c = _client(secured.url, supplier)
    try:
        producer = c.create_producer("persistent://public/default/auth-refresh")
        first = len(issued)
        for i in range(8):
            producer.send(f"m{i}".encode())
            time.sleep(0.5)
        bobs = [
            conn
            for conn in secured.service.connections  # type: ignore[union-attr]
            if conn.auth_session.role == "bob"
        ]
        assert len(bobs) == 1
        assert bobs[0].auth_session.identity.expires_at > time.time()
        assert len(issued) > first  # the client was asked for a new token, on the same connection
    finally:
        c.close()


def test_rs256_and_es256_public_keys() -> None:
    for alg in ("RS256", "ES256"):
        private, public = new_key_pair(alg)
        svc = AuthenticationService(
            _config(
                token_secret_key="",
                token_public_alg=alg,
                token_public_key="data:;base64," + base64.b64encode(public).decode(),
            )
        )
        assert svc.authenticate("token", create_token("carol", private_key=private).encode()).role == "carol"
        other, _ = new_key_pair(alg)
        with pytest.raises(AuthenticationError):
            svc.authenticate("token", create_token("carol", private_key=other).encode())
        with pytest.raises(AuthenticationError):  # an unsigned token
            svc.authenticate("token", jwt.encode({"sub": "carol"}, None, algorithm="none").encode())


def test_custom_claim_file_key_and_config_errors(tmp_path) -> None:  # type: ignore[no-untyped-def]
    key = tmp_path / "secret.key"
    key.write_bytes(SECRET)
    svc = AuthenticationService(_config(token_secret_key=f"file://{key}", token_auth_claim="role"))
    token = create_token("dave", secret_key=SECRET, subject_claim="role")
    assert svc.authenticate("token", token.encode()).role == "dave"
    with pytest.raises(AuthenticationError):
        svc.authenticate("token", create_token("dave", secret_key=SECRET).encode())  # no "role" claim
    with pytest.raises(ConfigError, match="token_secret_key"):
        AuthenticationService(_config(token_secret_key=f"file://{tmp_path}/missing"))
    with pytest.raises(ConfigError, match="authentication_providers"):
        AuthenticationService(_config(authentication_providers=("kerberos",)))
    with pytest.raises(ConfigError, match="authentication_providers"):
        _config(authentication_providers=()).validate()
    pulsar_name = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
    assert AuthenticationService(_config(authentication_providers=(pulsar_name,))).providers


def test_anonymous_role() -> None:
    svc = AuthenticationService(_config(anonymous_user_role="guest"))
    assert svc.authenticate("", b"").role == "guest"
    assert svc.authenticate_http(None).role == "guest"


def _raw_connect(port: int, token: str, refresh: bool) -> RawPeer:
    peer = RawPeer(port)
    peer.send(
        "CONNECT",
        client_version="raw",
        protocol_version=20,
        auth_method_name="token",
        auth_data=token.encode(),
        feature_flags={"supports_auth_refresh": refresh},
    )
    answer = peer.recv()
    assert answer is not None and answer.type == pb.BaseCommand.CONNECTED, answer
    return peer


def test_expired_connection_without_refresh_support_is_closed(secured: BrokerThread) -> None:
    peer = _raw_connect(secured.port, create_token("eve", secret_key=SECRET, expires_in_s=1), refresh=False)
    try:
        assert all(c.type == pb.BaseCommand.PING for c in peer.recv_until_closed())
    finally:
        peer.close()


@pytest.mark.parametrize("answer", ["valid", "other-role", "forged", "none"])
def test_auth_challenge_answers(secured: BrokerThread, answer: str) -> None:
    peer = _raw_connect(secured.port, create_token("frank", secret_key=SECRET, expires_in_s=1), refresh=True)
    try:
        challenge = peer.recv()
        assert challenge is not None and challenge.type == pb.BaseCommand.AUTH_CHALLENGE, challenge
        assert challenge.authChallenge.challenge.auth_method_name == "token"
        assert challenge.authChallenge.challenge.auth_data == b"PulsarAuthRefresh"
        tokens = {
            "valid": create_token("frank", secret_key=SECRET, expires_in_s=60),
            "other-role": create_token("mallory", secret_key=SECRET, expires_in_s=60),
            "forged": create_token("frank", secret_key=new_secret_key(), expires_in_s=60),
        }
        if answer in tokens:
            peer.send(
                "AUTH_RESPONSE",
                protocol_version=20,
                client_version="raw",
                response={"auth_method_name": "token", "auth_data": tokens[answer].encode()},
            )
        if answer == "valid":
            time.sleep(2.5)  # two more refresh checks: no new challenge, no close
            peer.assert_alive()
        else:
            assert all(c.type in (pb.BaseCommand.PING, pb.BaseCommand.AUTH_CHALLENGE) for c in peer.recv_until_closed())
    finally:
        peer.close()


def test_audience_is_checked_when_configured() -> None:
    svc = AuthenticationService(_config(token_audience="cluster-a"))
    ok = create_token("gina", secret_key=SECRET, claims={"aud": ["cluster-a", "other"]})
    assert svc.authenticate("token", ok.encode()).role == "gina"
    for claims in ({"aud": "cluster-b"}, {}):
        with pytest.raises(AuthenticationError, match="audience"):
            svc.authenticate("token", create_token("gina", secret_key=SECRET, claims=claims).encode())
    custom = AuthenticationService(_config(token_audience="a", token_audience_claim="realm"))
    token = create_token("gina", secret_key=SECRET, claims={"realm": "a"})
    assert custom.authenticate("token", token.encode()).role == "gina"


def test_perf_sends_the_token_from_the_environment(secured: BrokerThread) -> None:
    from click.testing import CliRunner

    from magnetar.cli import main

    topic = "persistent://public/default/auth-perf"
    c = _client(secured.url, create_token("checker", secret_key=SECRET))
    try:
        consumer = c.subscribe(topic, "check")
        args = ["perf", "produce", "-u", secured.url, topic, "--size", "10", "--num-messages", "20", "--time", "20"]
        ok = CliRunner().invoke(main, args, env={"MAGNETAR_TOKEN": create_token("perf", secret_key=SECRET)})
        assert ok.exit_code == 0, ok.output
        for _ in range(20):
            consumer.receive(5000)
    finally:
        c.close()
