"""A security scan of gridloop's own templates: Trivy's Kubernetes checks, HIGH and up.

Each profile is rendered by `gridloop render` from charts/gridloop as it is in git
(upstream manifests come from `gridloop bundle` and are not gridloop's templates),
once as shipped and once with tests/unit/chart_values/everything.yaml turning every
part of gridloop's own on. Trivy's Kubernetes misconfiguration scan (trivy-k8s-config:
Trivy's own scanner and checks, built from its Go module by `gridloop local build`, the
checks compiled in, nothing downloaded) scans the rendered objects. A HIGH or CRITICAL
finding fails the test unless ACCEPTED lists it, with the reason that docs/security.md
gives.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml
from chart_files import CHART, EVERYTHING, PROFILE_NAMES, UPSTREAM_OFF
from test_chart_bundled import helm

import upstream_mirror
from gridloop.bundle import bundling
from gridloop.errors import BuildError
from gridloop.local.build.building import binary
from gridloop.local.build.recipes import TRIVY_K8S_CONFIG

# Trivy's real scanner and checks, on a rendering by helm: both built by `gridloop local build`
pytestmark = pytest.mark.needs_binaries("helm", TRIVY_K8S_CONFIG)

# (check ID, kind/name of the object) -> why it is accepted; docs/security.md repeats it
ACCEPTED: dict[tuple[str, str], str] = {
    ("KSV-0014", "DaemonSet/gridloop-dcgm-exporter"): (
        "NVIDIA's image starts the exporter through an entrypoint that refreshes the dynamic "
        "linker's cache (ldconfig writes /etc/ld.so.cache) so libdcgm and the driver "
        "libraries the NVIDIA runtime mounts in are found; it writes the image's own layer, "
        "never the node"
    ),
}
# Upstream's manifests as `gridloop bundle` adds them (its edits included: a controller
# shipped with no securityContext gets a locked-down one, bundle/adjustments.py): each
# HIGH or CRITICAL finding kept, with its reason; docs/security.md repeats them
ACCEPTED_UPSTREAM: dict[tuple[str, str], str] = {
    ("KSV-0114", "ClusterRole/kueue-manager-role"): (
        "Kueue's internal certificate management writes the CA bundle into its own webhook "
        "configurations: get and update are already limited to those two by resourceNames; "
        "list and watch cannot be"
    ),
    ("KSV-0041", "ClusterRole/kuberay-operator"): (
        "KubeRay makes each Ray cluster's token Secret (authOptions: token) and reads it back, "
        "in whatever namespace the cluster is (create, get, list, watch; no update or delete)"
    ),
    ("KSV-0050", "ClusterRole/kuberay-operator"): (
        "KubeRay makes a Role and RoleBinding for each Ray cluster's autoscaler"
    ),
    ("KSV-0056", "ClusterRole/kuberay-operator"): (
        "KubeRay makes each Ray cluster's Services (head, serve) and, when asked, its Ingress"
    ),
    ("KSV-0056", "ClusterRole/agent-sandbox-controller"): (
        "agent-sandbox makes each Sandbox's Service"
    ),
    ("KSV-0056", "ClusterRole/agent-sandbox-controller-extensions"): (
        "agent-sandbox's extensions make a SandboxTemplate's NetworkPolicy"
    ),
    ("KSV-0041", "ClusterRole/kaito-workspace-clusterrole"): (
        "KAITO's admission webhook keeps its serving certificate in a Secret, which knative's "
        "certificate controller (the webhook library KAITO uses) watches through an informer "
        "on every namespace: get, list, watch, no write"
    ),
    ("KSV-0056", "ClusterRole/kaito-workspace-clusterrole"): (
        "KAITO makes each Workspace's Services (the model's endpoint and its headless one)"
    ),
    ("KSV-0114", "ClusterRole/kaito-workspace-clusterrole"): (
        "KAITO writes its certificate's CA bundle into its own webhook configuration: update "
        "is limited to validation.workspace.kaito.sh by resourceNames"
    ),
    ("KSV-0114", "ClusterRole/kaito-workspace-inferenceset-clusterrole"): (
        "the same for its InferenceSet webhook (validation.inferenceset.kaito.sh); get, list "
        "and watch cannot be limited by name"
    ),
}
# "Container 'x' of DaemonSet 'name' should ...": the object, when Trivy names no resource;
# "ClusterRole 'name' should not ...": the same for a role
_OBJECT_IN_MESSAGE = re.compile(r"\bof (\w+) '([^']+)'")
_OBJECT_FIRST = re.compile(r"^(\w+) '([^']+)'")


def _trivy() -> str:
    try:
        return str(binary(TRIVY_K8S_CONFIG))
    except BuildError as err:
        pytest.fail(f"{err}: the security scan runs Trivy's real scanner", pytrace=False)


def _render(gridloop, out: Path, profile: str, everything: bool) -> Path:
    args = ["render", "--chart", str(CHART), "--profile", profile, "--set", UPSTREAM_OFF]
    if everything:
        args += ["-f", str(EVERYTHING)]
    result = gridloop(*args)
    assert result.returncode == 0, result.stderr
    folder = out / f"{profile}{'-everything' if everything else ''}"
    folder.mkdir()
    (folder / "rendered.yaml").write_text(result.stdout)
    return folder


def findings(folder: Path) -> list[tuple[str, str, str, str]]:
    """(severity, check ID, kind/name, title) of each failed HIGH or CRITICAL check."""
    result = subprocess.run(
        [_trivy(), "--severity=HIGH,CRITICAL", str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout)
    # each manifest scanned is a result, failed or not: none means nothing was scanned
    assert report.get("Results"), f"no Kubernetes manifest scanned in {folder}"
    out = []
    for target in report.get("Results") or []:
        for m in target.get("Misconfigurations") or []:
            if m.get("Status") != "FAIL":
                continue
            meta = m.get("CauseMetadata") or {}
            message = m.get("Message") or ""
            named = _OBJECT_IN_MESSAGE.search(message) or _OBJECT_FIRST.match(message)
            where = meta.get("Resource") or ("/".join(named.groups()) if named else "")
            where = where or str(target.get("Target"))
            out.append((m["Severity"], m["ID"], where, m["Title"]))
    return out


@pytest.mark.parametrize("everything", [False, True], ids=["as-shipped", "everything-on"])
@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_no_high_or_critical_finding_in_gridloop_s_templates(
    gridloop, tmp_path: Path, profile: str, everything: bool
) -> None:
    folder = _render(gridloop, tmp_path, profile, everything)
    found = findings(folder)
    unexpected = [f for f in found if (f[1], f[2]) not in ACCEPTED]
    assert unexpected == [], "\n".join(" ".join(f) for f in unexpected)


@pytest.fixture(scope="module")
def upstream_rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle's upstream objects (Kueue, KubeRay, agent-sandbox, and KAITO from its
    release in the upstream mirror) as the production profile renders them, alone in a
    folder."""
    tmp = tmp_path_factory.mktemp("upstream-scan")
    request = bundling.Request(out=tmp / "dist", chart=CHART, mirror=upstream_mirror.folder())
    chart = bundling.bundle(request).folder
    production = ("-f", str(chart / "profiles" / "production.yaml"))
    done = helm(
        "template", "gridloop", str(chart), "--namespace=gridloop-system", *production, home=tmp
    )
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    theirs = [d for d in docs if _labels(d).get("app.kubernetes.io/part-of") != "gridloop"]
    controllers = {d["metadata"]["name"] for d in theirs if d["kind"] == "Deployment"}
    assert controllers == {
        "kueue-controller-manager",
        "kuberay-operator",
        "agent-sandbox-controller",
        "kaito-workspace",
    }
    folder = tmp / "upstream"
    folder.mkdir()
    (folder / "upstream.yaml").write_text(yaml.safe_dump_all(theirs))
    return folder


def _labels(doc: dict) -> dict:
    return dict((doc.get("metadata") or {}).get("labels") or {})


@pytest.mark.needs_binaries("kubectl")  # the bundle's renderings, when not cached
def test_upstream_controllers_have_no_high_or_critical_finding_but_the_justified(
    upstream_rendered: Path,
) -> None:
    found = findings(upstream_rendered)
    unexpected = [f for f in found if (f[1], f[2]) not in ACCEPTED_UPSTREAM]
    assert unexpected == [], "\n".join(" ".join(f) for f in unexpected)
    # an exception upstream no longer needs goes: the list is what the scan finds
    assert {(f[1], f[2]) for f in found} == set(ACCEPTED_UPSTREAM)


def test_the_scan_finds_a_privileged_container(tmp_path: Path) -> None:
    """The scanner is really looking: a privileged, root container is a HIGH finding."""
    folder = tmp_path / "bad"
    folder.mkdir()
    (folder / "pod.yaml").write_text(
        """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: bad, namespace: default}
spec:
  selector: {matchLabels: {app: bad}}
  template:
    metadata: {labels: {app: bad}}
    spec:
      containers:
        - name: bad
          image: busybox:1.36
          securityContext: {privileged: true, runAsUser: 0}
"""
    )
    found = findings(folder)
    assert any(f[0] in ("HIGH", "CRITICAL") and "rivileged" in f[3] for f in found), found
