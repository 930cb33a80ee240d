"""Every file in ``deploy/`` (systemd units, ZooKeeper config, Dockerfile, Compose file,
Kubernetes kustomize base) checked by the tool made for it where this machine has it
(``systemd-analyze verify``, ``kubectl kustomize``; ``docker compose config`` is not installed
here) and by reference checks: each ``magnetar`` command line parses with the real CLI and loads
its config files with the real loaders, probes and health checks hit the real health endpoints on
the ports the commands listen on, and every name a file refers to (service, volume, ConfigMap,
port, file to copy) exists."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from magnetar.cli import main as cli_main

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BROKER_PROBES = {"/admin/v2/brokers/ready", "/status.html", "/admin/v2/brokers/health"}
BOOKIE_PROBES = {"/api/v1/bookie/is_ready", "/heartbeat"}


def _check_magnetar_args(args: list[str], conf_files: dict[str, Path]) -> dict[str, Any]:
    """Parse ``magnetar ARGS`` with the real CLI and load its config with the real loader.
    ``conf_files`` maps the path a deployment gives ``--conf`` to the file in the repository."""
    name, rest = args[0], args[1:]
    cmd = cli_main.get_command(click.Context(cli_main), name)
    assert cmd is not None, f"no magnetar command {name!r}"
    ctx = cmd.make_context(name, list(rest))
    params = dict(ctx.params)
    conf = params.get("conf")
    if conf is not None:
        assert str(conf) in conf_files, f"--conf {conf} is not a file the deployment provides"
        params["conf"] = conf_files[str(conf)]
    if name == "broker":
        from magnetar.cli._common import load_sections
        from magnetar.cli.cmd_broker import config_sections

        flags: dict[str, dict[str, Any]] = {"cluster": {}, "broker": {}}
        if params["metadata_url"] is not None:
            flags["cluster"]["metadata_url"] = params["metadata_url"]
        for key, flag in (("broker_service_port", "port"), ("web_service_port", "web_port")):
            if params[flag] is not None:
                flags["broker"][key] = str(params[flag])
        cfg = load_sections(params["conf"], config_sections(), params["overrides"], flags)
        return {"http_port": cfg["broker"].web_service_port, "metadata_url": cfg["cluster"].metadata_url}
    if name == "bookie":
        from magnetar.cli.cmd_bookie import _load

        params.pop("log_level", None)
        config = _load(**params)
        return {"http_port": config.http_port, "metadata_url": config.metadata_url}
    return params


# ---------------------------------------------------------------------------------------- systemd

UNITS = sorted((DEPLOY / "systemd").glob("*.service"))


def _unit(path: Path) -> dict[str, dict[str, list[str]]]:
    sections: dict[str, dict[str, list[str]]] = {}
    current = ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            sections.setdefault(current, {})
            continue
        key, _, value = line.partition("=")
        sections[current].setdefault(key, []).append(value)
    return sections


def test_every_component_has_a_unit() -> None:
    names = {p.name for p in UNITS}
    assert names == {
        "magnetar-zookeeper.service",
        "magnetar-bookie.service",
        "magnetar-broker.service",
        "magnetar-autorecovery.service",
    }


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_systemd_analyze_verify(unit: Path, tmp_path: Path) -> None:
    # verify checks that ExecStart's program exists: point it at this venv's magnetar entry point
    magnetar = Path(sys.executable).parent / "magnetar"
    assert magnetar.exists(), magnetar
    text = unit.read_text().replace("/opt/magnetar/venv/bin/magnetar", str(magnetar))
    copy = tmp_path / unit.name
    copy.write_text(text)
    result = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


@pytest.mark.parametrize("unit", UNITS, ids=lambda p: p.name)
def test_unit_command_lines_parse_and_load_their_config(unit: Path) -> None:
    sections = _unit(unit)
    service = sections["Service"]
    assert service["Restart"] == ["on-failure"]
    assert sections["Install"]["WantedBy"] == ["multi-user.target"]
    env: dict[str, str] = {}
    for assignment in service.get("Environment", []):
        for item in shlex.split(assignment):
            key, _, value = item.partition("=")
            env[key] = value
    exec_start = service["ExecStart"][0]
    expanded = re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], exec_start)
    argv = [a for a in (re.sub(r"^\$(\w+)$", lambda m: env[m.group(1)], w) for w in shlex.split(expanded)) if a]
    if argv[0] == "/usr/bin/java":
        cfg = argv[-1]
        assert cfg == "/etc/magnetar/zoo.cfg"
        assert "org.apache.zookeeper.server.quorum.QuorumPeerMain" in argv
        return
    assert argv[0] == "/opt/magnetar/venv/bin/magnetar"
    conf_files = {f"/etc/magnetar/{p.name}": p for p in DEPLOY.glob("*.toml")}
    _check_magnetar_args(argv[1:], conf_files)


def test_zookeeper_config_has_what_the_checks_need() -> None:
    entries = dict(
        line.split("=", 1)
        for line in (DEPLOY / "zookeeper" / "zoo.cfg").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert entries["clientPort"] == "2181"
    assert entries["dataDir"].startswith("/var/lib/magnetar/")  # the unit's StateDirectory
    assert "ruok" in entries["4lw.commands.whitelist"].split(",")
    assert int(entries["tickTime"]) > 0


# ---------------------------------------------------------------------------------------- Docker

DOCKERFILE = DEPLOY / "docker" / "Dockerfile"


def _copies() -> list[tuple[list[str], str]]:
    out = []
    for line in DOCKERFILE.read_text().splitlines():
        if line.startswith("COPY "):
            *sources, dest = line.split()[1:]
            out.append((sources, dest))
    return out


def test_dockerfile_copies_every_package_and_existing_files() -> None:
    copied = {s for sources, _ in _copies() for s in sources}
    for source in copied:
        assert (REPO / source).exists(), f"Dockerfile copies {source}, which does not exist"
    includes = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {p.rstrip("*") for p in includes["include"]}
    assert packages <= copied, f"packages not copied into the image: {packages - copied}"
    text = DOCKERFILE.read_text()
    assert 'ENTRYPOINT ["magnetar"]' in text
    assert "USER magnetar" in text


COMPOSE = DEPLOY / "docker" / "compose.yaml"


def _image_conf_files() -> dict[str, Path]:
    """The config files the image holds: ``COPY deploy/x.toml ... /etc/magnetar/``."""
    out = {}
    for sources, dest in _copies():
        if dest.startswith("/etc/magnetar"):
            for s in sources:
                out[f"/etc/magnetar/{Path(s).name}"] = REPO / s
    return out


def _probe_port_and_path(test: list[str]) -> tuple[int, str]:
    match = re.search(r"http://localhost:(\d+)(/[^'\"]*)", " ".join(test))
    assert match, test
    return int(match.group(1)), match.group(2)


def test_compose_topology_and_references() -> None:
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        result = subprocess.run(
            ["docker", "compose", "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stderr
    doc = yaml.safe_load(COMPOSE.read_text())
    services: dict[str, Any] = doc["services"]
    roles: dict[str, list[str]] = {}
    for name, svc in services.items():
        command = svc.get("command")
        roles.setdefault(command[0] if command and svc.get("image", "").startswith("magnetar") else name, []).append(
            name
        )
    assert len(roles["bookie"]) == 3 and len(roles["broker"]) == 2, roles
    assert "zookeeper" in services and "autorecovery" in roles and "initialize-cluster-metadata" in roles
    conf_files = _image_conf_files()
    published: list[str] = []
    bookie_ids = set()
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            if cond["condition"] == "service_healthy":
                assert "healthcheck" in services[dep], f"{name} waits for {dep}'s health, which has no check"
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            assert source in (doc.get("volumes") or {}), f"{name}: volume {source} is not declared"
        published += [p.split(":")[0] for p in svc.get("ports", [])]
        if "build" in svc:
            assert (COMPOSE.parent / svc["build"]["context"] / svc["build"]["dockerfile"]).resolve() == DOCKERFILE
        command = svc.get("command")
        if not command or not svc.get("image", "").startswith("magnetar"):
            continue
        loaded = _check_magnetar_args(list(command), conf_files)
        if command[0] in ("bookie", "broker", "autorecovery"):
            assert "zk://zookeeper:2181" in (loaded.get("metadata_url"), command[command.index("--metadata-url") + 1])
        if command[0] in ("bookie", "broker"):
            port, path = _probe_port_and_path(svc["healthcheck"]["test"])
            assert port == loaded["http_port"], f"{name}: health check port {port} is not the HTTP port"
            assert path in (BOOKIE_PROBES if command[0] == "bookie" else BROKER_PROBES), path
        if command[0] == "bookie":
            bookie_ids.add(next(a for a in command if a.startswith("advertised_address=")))
    assert len(bookie_ids) == 3, "each bookie needs its own advertised address (its bookie id)"
    assert len(published) == len(set(published)), f"a host port is published twice: {published}"


# ---------------------------------------------------------------------------------------- Kubernetes

K8S = DEPLOY / "k8s"


def _rendered() -> list[dict[str, Any]]:
    """The base as kubectl renders it, or (without kubectl) the resources with the generated
    ConfigMap built the way kustomize does (name without its hash suffix)."""
    if shutil.which("kubectl"):
        result = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        return [d for d in yaml.safe_load_all(result.stdout) if d]
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    docs = [d for r in kustomization["resources"] for d in yaml.safe_load_all((K8S / r).read_text()) if d]
    for gen in kustomization.get("configMapGenerator", []):
        data = {Path(f).name: (K8S / f).read_text() for f in gen["files"]}
        docs.append({"kind": "ConfigMap", "metadata": {"name": gen["name"]}, "data": data})
    return docs


def _configmap(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    # kustomize appends a content hash to generated names and rewrites the references to match
    return next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == name)


def test_kustomize_base_references_and_probes(tmp_path: Path) -> None:
    docs = _rendered()
    kinds = {(d["kind"], d["metadata"]["name"]) for d in docs}
    for workload in (
        ("StatefulSet", "zookeeper"),
        ("StatefulSet", "bookie"),
        ("Deployment", "broker"),
        ("Deployment", "autorecovery"),
        ("Job", "initialize-cluster-metadata"),
    ):
        assert workload in kinds, f"{workload} missing from the base"
    pods = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("StatefulSet", "Deployment", "Job")}
    checked_probes = set()
    for (kind, name), workload in pods.items():
        template = workload["spec"]["template"]
        if kind != "Job":
            selector = workload["spec"]["selector"]["matchLabels"]
            assert selector.items() <= template["metadata"]["labels"].items(), f"{name}: selector matches no pod"
        spec = template["spec"]
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        claims = {c["metadata"]["name"] for c in workload["spec"].get("volumeClaimTemplates", [])}
        for container in spec["containers"]:
            ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in claims, f"{name}: unknown volume {mount['name']}"
                volume = volumes.get(mount["name"])
                if volume and "configMap" in volume:
                    cm = _configmap(docs, volume["configMap"]["name"])
                    if "subPath" in mount:
                        assert mount["subPath"] in cm["data"], f"{name}: {mount['subPath']} not in the ConfigMap"
            conf_files = {}
            for mount in container.get("volumeMounts", []):
                volume = volumes.get(mount["name"])
                if volume and "configMap" in volume and "subPath" in mount:
                    local = tmp_path / f"{name}-{mount['subPath']}"
                    local.write_text(_configmap(docs, volume["configMap"]["name"])["data"][mount["subPath"]])
                    conf_files[mount["mountPath"]] = local
            env = {e["name"]: "value-of-" + e["name"].lower() for e in container.get("env", [])}
            args = [re.sub(r"\$\((\w+)\)", lambda m, env=env: env[m.group(1)], a) for a in container.get("args", [])]
            if container["image"].startswith("magnetar"):
                loaded = _check_magnetar_args(args, conf_files)
                if args[0] in ("bookie", "broker"):
                    assert loaded["metadata_url"] == "zk://zookeeper:2181"
            for probe_kind in ("readinessProbe", "livenessProbe"):
                probe = container.get(probe_kind)
                if probe is None:
                    continue
                target = probe.get("httpGet") or probe.get("tcpSocket")
                if target is not None:
                    assert target["port"] in ports, f"{name}: probe port {target['port']} not a container port"
                if "httpGet" in probe:
                    path = probe["httpGet"]["path"]
                    assert path in (BOOKIE_PROBES if name == "bookie" else BROKER_PROBES), f"{name}: {path}"
                    assert ports[target["port"]] == loaded["http_port"], f"{name}: probe is not on the HTTP port"
                    checked_probes.add(path)
    assert {"/api/v1/bookie/is_ready", "/heartbeat", "/admin/v2/brokers/ready", "/status.html"} <= checked_probes
    for svc in (d for d in docs if d["kind"] == "Service"):
        selected = [
            w
            for w in pods.values()
            if svc["spec"]["selector"].items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert selected, f"Service {svc['metadata']['name']} selects no pod"
        for port in svc["spec"]["ports"]:
            names = {
                p["name"]
                for w in selected
                for c in w["spec"]["template"]["spec"]["containers"]
                for p in c.get("ports", [])
            }
            assert port["targetPort"] in names, f"Service {svc['metadata']['name']}: no port {port['targetPort']}"


@pytest.mark.slow
def test_dockerfile_sources_build_a_complete_package(tmp_path: Path) -> None:
    """What ``RUN pip install .`` does in the image, on exactly the files the Dockerfile copies
    (no daemon here to build the image): the wheel holds every package and the entry point."""
    src = tmp_path / "src"
    src.mkdir()
    for sources, dest in _copies():
        if dest.startswith("/etc/"):
            continue
        for s in sources:
            target = src / (Path(s).name if dest.endswith("/") or dest == "./" else dest)
            if (REPO / s).is_dir():
                shutil.copytree(REPO / s, src / s, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy(REPO / s, target)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path / "dist"),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    import zipfile

    wheel = next((tmp_path / "dist").glob("magnetar-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    includes = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    for package in (p.rstrip("*") for p in includes["include"]):
        assert f"{package}/__init__.py" in names, f"{package} missing from the image's install"
    assert any(n.endswith("entry_points.txt") for n in names)
    assert "broker/admin/_app.py" in names and "bookie/server/_http.py" in names
