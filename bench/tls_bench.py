"""Produce/consume throughput with TLS on versus off, on the same machine in the same run.

Two ``magnetar standalone`` subprocesses (1 bookie each, default storage config): one plain, one
with TLS everywhere (client -> broker over ``pulsar+ssl://`` with client certificates required,
broker -> bookie over TLS with client authentication). Certificates come from trustme, in a
temporary directory. The official client (in this process) produces N messages with
``send_async`` (no batching, the Python client's default; 1,000 more first, untimed) and then a new subscription reads
them all from the start; runs alternate plain / TLS. Asserts
nothing; prints msg/s per run and the TLS / plain ratio of the medians.

With ``--token`` the TLS standalone also turns on token authentication and authorization
(``authenticationEnabled``, the ``token`` provider with an HS256 ``tokenSecretKey``,
``authorizationEnabled``); the client then presents its certificate for TLS
(``tls_certificate_file_path``) and authenticates with ``AuthenticationToken`` (a token of a
super-user role): issue 13's "TLS + token" against plain.

    .venv/bin/python bench/tls_bench.py [--messages 20000] [--size 1024] [--runs 3] [--client-only] [--token]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pulsar
import trustme

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from broker.auth import create_token, new_secret_key

REPO = Path(__file__).resolve().parents[1]


def _certs(tmp: Path) -> dict[str, str]:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("client.bench", common_name="client")
    files = {
        "ca": ca.cert_pem,
        "server": server.cert_chain_pems[0],
        "server_key": server.private_key_pem,
        "client": client.cert_chain_pems[0],
        "client_key": client.private_key_pem,
    }
    out = {}
    for name, blob in files.items():
        path = tmp / f"{name}.pem"
        blob.write_to_path(str(path))
        out[name] = str(path)
    secret = new_secret_key()
    (tmp / "secret.key").write_bytes(secret)
    out["secret"] = str(tmp / "secret.key")
    out["token"] = create_token("bench", secret_key=secret)
    return out


BOOKIE_TLS = True  # --client-only: TLS between the client and the broker only
TOKEN = False  # --token: token authentication and authorization on the TLS standalone too


def _conf(tmp: Path, tls: bool, c: dict[str, str]) -> Path:
    lines = [
        "[standalone]",
        "bookie_port = 0",
        "bookie_http_port = 0",
        "[broker]",
        "brokerServicePort = 0",
        "webServicePort = 0",
    ]
    if tls:
        lines += [
            "brokerServicePortTls = 0",
            f'tlsCertificateFilePath = "{c["server"]}"',
            f'tlsKeyFilePath = "{c["server_key"]}"',
            f'tlsTrustCertsFilePath = "{c["ca"]}"',
            "tlsRequireTrustedClientCertOnConnect = true",
        ]
    if tls and TOKEN:
        lines += [
            "authenticationEnabled = true",
            'authenticationProviders = ["token"]',
            f'tokenSecretKey = "file://{c["secret"]}"',
            "authorizationEnabled = true",
            'superUserRoles = ["bench"]',
        ]
    if tls and BOOKIE_TLS:
        lines += [
            "[bookie]",
            "tls_enabled = true",
            "tlsClientAuthentication = true",
            f'tlsCertificatePath = "{c["server"]}"',
            f'tlsKeyStore = "{c["server_key"]}"',
            f'tlsTrustStore = "{c["ca"]}"',
            "[bk_client]",
            "tls_enabled = true",
            f'tlsTrustStore = "{c["ca"]}"',
            f'tlsCertificatePath = "{c["client"]}"',
            f'tlsKeyStore = "{c["client_key"]}"',
        ]
    path = tmp / ("tls.toml" if tls else "plain.toml")
    path.write_text("\n".join(lines) + "\n")
    return path


def _start(tmp: Path, tls: bool, c: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    name = "tls" if tls else "plain"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "magnetar",
            "standalone",
            "--conf",
            str(_conf(tmp, tls, c)),
            "--data-dir",
            str(tmp / f"data-{name}"),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    url = ""
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        m = re.search(r"broker TLS: (pulsar\+ssl://\S+)" if tls else r"broker: (pulsar://\S+)", line)
        if m:
            url = m.group(1)
        if line.startswith("ready") or time.monotonic() > deadline:
            break
    if not url:
        proc.kill()
        raise RuntimeError(f"{name} standalone did not start")
    threading.Thread(target=lambda: proc.stdout.read() if proc.stdout else None, daemon=True).start()
    return proc, url


def _run(url: str, tls: bool, c: dict[str, str], topic: str, n: int, size: int) -> tuple[float, float]:
    kwargs = {}
    if tls and TOKEN:
        kwargs = {
            "tls_trust_certs_file_path": c["ca"],
            "tls_certificate_file_path": c["client"],
            "tls_private_key_file_path": c["client_key"],
            "authentication": pulsar.AuthenticationToken(c["token"]),
        }
    elif tls:
        kwargs = {
            "tls_trust_certs_file_path": c["ca"],
            "authentication": pulsar.AuthenticationTLS(c["client"], c["client_key"]),
        }
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=_quiet(), **kwargs)
    try:
        producer = client.create_producer(topic, max_pending_messages=10000, block_if_queue_full=True)
        payload = b"x" * size
        for _ in range(1000):  # warm-up (topic load, first ledger), not timed
            producer.send_async(payload, None)
        producer.flush()
        t0 = time.perf_counter()
        for _ in range(n):
            producer.send_async(payload, None)
        producer.flush()
        produce = n / (time.perf_counter() - t0)
        # catch-up read of everything just written, by a new subscription
        consumer = client.subscribe(
            topic, "bench", receiver_queue_size=5000, initial_position=pulsar.InitialPosition.Earliest
        )
        t0 = time.perf_counter()
        for _ in range(n + 1000):
            consumer.acknowledge(consumer.receive(60_000))
        consume = (n + 1000) / (time.perf_counter() - t0)
        return produce, consume
    finally:
        client.close()


def _quiet() -> pulsar.ConsoleLogger:
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--client-only", action="store_true", help="no TLS between the broker and the bookie")
    ap.add_argument("--token", action="store_true", help="token authentication and authorization with TLS")
    args = ap.parse_args()
    global BOOKIE_TLS, TOKEN
    BOOKIE_TLS = not args.client_only
    TOKEN = args.token
    label = "TLS+token" if TOKEN else "TLS"
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        c = _certs(tmp)
        procs = {tls: _start(tmp, tls, c) for tls in (False, True)}
        results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        try:
            for i in range(args.runs):
                for tls in (False, True):
                    proc, url = procs[tls]
                    r = _run(url, tls, c, f"persistent://public/default/bench-{i}", args.messages, args.size)
                    results[tls].append(r)
                    print(
                        f"run {i} {label if tls else 'plain':9}: produce {r[0]:9.0f} msg/s  consume {r[1]:9.0f} msg/s",
                        flush=True,
                    )
        finally:
            for proc, _ in procs.values():
                proc.terminate()
                proc.wait(30)
    for idx, what in ((0, "produce"), (1, "consume")):
        plain = statistics.median(r[idx] for r in results[False])
        tls = statistics.median(r[idx] for r in results[True])
        print(f"{what}: plain {plain:.0f} msg/s, {label} {tls:.0f} msg/s, ratio {tls / plain:.2f}")


if __name__ == "__main__":
    main()
