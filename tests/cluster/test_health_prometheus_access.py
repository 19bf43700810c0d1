"""The health service reads a Prometheus that wants TLS, a client certificate and a token,
as managed and kube-prometheus installs do.

Two guards stand in front of the local Prometheus's data here, both real: a second
Prometheus (Debian's, the one `local up` runs) scraping the same simulated exporters,
serving only HTTPS and only to clients with a certificate the cluster CA signed (its own
`--web.config.file`: Prometheus checks TLS and client certificates, not tokens); and in
front of that, kube-rbac-proxy (built from its module, pinned in versions.yaml), which
takes a bearer token, checks it with the local API server's TokenReview and the path with
a SubjectAccessReview, and forwards to that Prometheus with its own client certificate.
The service runs in this process (tests/cluster/test_health_service.py says how); its
token is a real ServiceAccount token from the TokenRequest API, for the proxy's audience.
The GPU metrics are simulated: no GPU here.
"""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import yaml
from fleet_reset import QUICK_POLICY, SCRAPE_S
from kubernetes import client
from platform_install import GRIDLOOP

from gridloop.health.actions import Quarantine
from gridloop.health.prometheus_access import Access
from gridloop.health.reading import connect
from gridloop.health.service import HealthService
from gridloop.local import certs
from gridloop.local.build import building

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.kwok_cluster,
    pytest.mark.needs_binaries("prometheus", "kube-rbac-proxy"),
]

POLICY = QUICK_POLICY
NODE = "eu-west-a100-001"
AUDIENCE = "gridloop-test-prometheus"
READER = "gridloop-test-prometheus-reader"
# the resource kube-rbac-proxy asks the API server about (a SubjectAccessReview)
PROMETHEUS_API = {
    "namespace": "default",
    "apiGroup": "monitoring.coreos.com",
    "apiVersion": "v1",
    "resource": "prometheuses",
    "subresource": "api",
    "name": "guarded",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclasses.dataclass(frozen=True)
class Tls:
    ca: Path
    server: Path  # tls.crt, tls.key: 127.0.0.1, signed by the cluster CA
    client: Path  # client.crt, client.key: a client certificate, signed by it too

    @property
    def client_pair(self) -> tuple[str, str]:
        return str(self.client / "client.crt"), str(self.client / "client.key")


@pytest.fixture(scope="module")
def tls(local_cluster, tmp_path_factory) -> Tls:
    pki = certs.Pki(local_cluster.state.dir / "pki")
    work = tmp_path_factory.mktemp("prometheus-tls")
    server = certs.ensure_loopback_server(pki, work / "server", "prometheus", ())
    return Tls(pki.path("ca.crt"), server, certs.ensure_client(pki, work / "client", "gridloop"))


def _started(argv: list[str], log: Path, ready: object, what: str) -> subprocess.Popen:
    """`argv` started, once `ready()` says so (within 60 s), else its log in the failure."""
    process = subprocess.Popen(argv, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if ready():  # type: ignore[operator]
                return process
        except requests.RequestException:
            pass
        if process.poll() is not None:
            break
        time.sleep(0.5)
    process.kill()
    pytest.fail(f"{what} did not start:\n{log.read_text()[-2000:]}")


def _stopped(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def guarded(local_cluster, tls, tmp_path_factory) -> Iterator[str]:
    """A second Prometheus over the same scrape config, HTTPS only, asking every client
    for a certificate the cluster CA signed; its URL once it has scraped the exporters."""
    work, port = tmp_path_factory.mktemp("guarded-prometheus"), _free_port()
    web = work / "web.yml"
    web.write_text(
        yaml.safe_dump(
            {
                "tls_server_config": {
                    "cert_file": str(tls.server / "tls.crt"),
                    "key_file": str(tls.server / "tls.key"),
                    "client_auth_type": "RequireAndVerifyClientCert",
                    "client_ca_file": str(tls.ca),
                }
            }
        )
    )
    url = f"https://127.0.0.1:{port}"
    argv = [
        str(building.binary("prometheus")),
        f"--config.file={local_cluster.state.dir / 'prometheus.yml'}",
        f"--storage.tsdb.path={work / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--web.config.file={web}",
        "--log.level=warn",
    ]

    def scraped() -> bool:
        answer = requests.get(
            f"{url}/api/v1/query",
            params={"query": 'up{job="dcgm-exporter"} == 1'},
            verify=str(tls.ca),
            cert=tls.client_pair,
            timeout=5,
        )
        return answer.ok and bool(answer.json()["data"]["result"])

    process = _started(argv, work / "log", scraped, "the guarded Prometheus")
    try:
        yield url
    finally:
        _stopped(process)


@pytest.fixture(scope="module")
def proxy(local_cluster, tls, guarded, tmp_path_factory) -> Iterator[str]:
    """kube-rbac-proxy in front of the guarded Prometheus: a token for AUDIENCE, checked by
    the API server, and the right to GET the path; its URL."""
    work, port = tmp_path_factory.mktemp("kube-rbac-proxy"), _free_port()
    url = f"https://127.0.0.1:{port}"
    crt, key = tls.client_pair
    # what a token's account must be allowed: `get` on this Prometheus's API, as a resource
    # (kube-prometheus's way). Not the request's path: Kubernetes' own system:discovery
    # role lets every authenticated account GET /api/*, so a path check (the proxy's
    # default, without --config-file) let a token with no role of ours read Prometheus
    config = work / "config.yaml"
    config.write_text(yaml.safe_dump({"authorization": {"resourceAttributes": PROMETHEUS_API}}))
    argv = [
        str(building.binary("kube-rbac-proxy")),
        f"--secure-listen-address=127.0.0.1:{port}",
        f"--upstream={guarded}/",
        f"--upstream-ca-file={tls.ca}",
        f"--upstream-client-cert-file={crt}",
        f"--upstream-client-key-file={key}",
        f"--tls-cert-file={tls.server / 'tls.crt'}",
        f"--tls-private-key-file={tls.server / 'tls.key'}",
        f"--kubeconfig={local_cluster.kubeconfig}",
        f"--auth-token-audiences={AUDIENCE}",
        f"--config-file={config}",
    ]

    def answering() -> bool:  # up: it refuses a request without a token
        return requests.get(f"{url}/-/ready", verify=str(tls.ca), timeout=5).status_code == 401

    process = _started(argv, work / "log", answering, "kube-rbac-proxy")
    try:
        yield url
    finally:
        _stopped(process)


@pytest.fixture(scope="module")
def reader_role(local_cluster) -> Iterator[str]:
    """A ClusterRole that may `get` the guarded Prometheus's API (what the proxy asks the
    API server about a token's account)."""
    rbac = client.RbacAuthorizationV1Api(local_cluster.api)
    a = PROMETHEUS_API
    rule = {
        "apiGroups": [a["apiGroup"]],
        "resources": [f"{a['resource']}/{a['subresource']}"],
        "resourceNames": [a["name"]],
        "verbs": ["get"],
    }
    rbac.create_cluster_role({"metadata": {"name": READER}, "rules": [rule]})
    try:
        yield READER
    finally:
        rbac.delete_cluster_role(READER)


def _token(local_cluster, namespace: str, account: str, tmp_path: Path, bound: bool) -> Path:
    """A ServiceAccount's token for AUDIENCE (TokenRequest), written to a file; with
    `bound`, the account may read Prometheus."""
    core = local_cluster.core
    core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    if bound:
        client.RbacAuthorizationV1Api(local_cluster.api).create_cluster_role_binding(
            {
                "metadata": {"name": f"{READER}-{namespace}"[:63]},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": READER,
                },
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            }
        )
    request = {"spec": {"audiences": [AUDIENCE], "expirationSeconds": 600}}
    token = core.create_namespaced_service_account_token(account, namespace, request)
    path = tmp_path / f"{account}.token"
    path.write_text(token.status.token)
    return path


def _unbind(local_cluster, namespace: str) -> None:
    try:
        client.RbacAuthorizationV1Api(local_cluster.api).delete_cluster_role_binding(
            f"{READER}-{namespace}"[:63]
        )
    except client.ApiException as err:
        if err.status != 404:
            raise


def _service(local_cluster, namespace: str, url: str, access: Access) -> HealthService:
    return HealthService(
        local_cluster.api, connect(url, access), POLICY, namespace, log=lambda _m: None
    )


def test_over_tls_with_a_token_the_service_reads_and_quarantines_a_fault(
    local_cluster, namespace, tls, proxy, reader_role, tmp_path, sim, eventually, tainted, settle
) -> None:
    token = _token(local_cluster, namespace, "health", tmp_path, bound=True)
    try:
        service = _service(
            local_cluster, namespace, proxy, Access(ca_file=tls.ca, token_file=token)
        )
        settle(service)  # a cycle through the proxy sees a fresh, healthy fleet
        assert tainted() == set()

        sim("--node", NODE, "--gpu", "2", "--xid", "79")

        eventually(
            lambda: service.cycle() and NODE in tainted(), f"{NODE} quarantined", 3 * SCRAPE_S + 5
        )
        assert tainted() == {NODE}

        # `gridloop status` reads the same way, with the same flags
        shown = subprocess.run(
            [GRIDLOOP, "status", "--kubeconfig", str(local_cluster.kubeconfig),
             "--prometheus-url", proxy, "--prometheus-ca-file", str(tls.ca),
             "--prometheus-token-file", str(token), "--output", "json"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        status = json.loads(shown.stdout)
        assert "prometheus" not in status["problems"], status["problems"]
        (node,) = [n for n in status["nodes"] if n["name"] == NODE]
        assert node["exporterUp"] is True and node["reporting"] == 8, node
    finally:
        _unbind(local_cluster, namespace)


def test_without_a_token_or_without_its_rights_it_holds_saying_why_and_acts_on_nothing(
    local_cluster, namespace, tls, proxy, reader_role, tmp_path, sim, tainted
) -> None:
    unbound = _token(local_cluster, namespace, "stranger", tmp_path, bound=False)
    sim("--node", NODE, "--gpu", "2", "--xid", "79")
    time.sleep(2 * SCRAPE_S)  # the fault is in Prometheus: a reader would quarantine it
    for access, refusal in (
        (Access(ca_file=tls.ca), "HTTP Status Code 401"),
        (Access(ca_file=tls.ca, token_file=unbound), "HTTP Status Code 403"),
    ):
        service = _service(local_cluster, namespace, proxy, access)

        reports = [service.cycle() for _ in range(2)]

        for report in reports:
            assert report.held and report.held.startswith("cannot read Prometheus: query "), report
            assert refusal in report.held, report.held
            assert not any(isinstance(o.action, Quarantine) for o in report.outcomes)
        assert tainted() == set()


def test_prometheus_asks_for_a_client_certificate_and_the_service_presents_one(
    local_cluster, namespace, tls, guarded
) -> None:
    crt, key = tls.client_pair
    with_cert = _service(
        local_cluster,
        namespace,
        guarded,
        Access(ca_file=tls.ca, cert_file=Path(crt), key_file=Path(key)),
    )
    without = _service(local_cluster, namespace, guarded, Access(ca_file=tls.ca))

    seen = with_cert.observe()
    refused = without.cycle()

    assert seen.prometheus_error is None and NODE in seen.gpus
    assert refused.held and refused.held.startswith("cannot read Prometheus: query "), refused
    assert "certificate" in refused.held.lower(), refused.held
