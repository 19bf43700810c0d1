"""The Sandboxes view of `gridloop status`: agent-sandbox's templates and the pods they
run, from raw API objects (plain dicts) to rows, and the collector's thin shell around
them, fed by a fake API."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.rest import ApiException
from status_sample import SAMPLE

from gridloop.status import collecting, printing, views
from gridloop.status.snapshot import Sandbox, SandboxPod, Snapshot

NOW = 1_800_000_300.0  # 2027-01-15T08:05:00Z

POOL = {"agents.x-k8s.io/warm-pool-sandbox": "1a2b3c4d"}
GRIDLOOP = {"gridloop.io/sandbox-template": "python-gvisor"}


def hashed(template: str) -> dict[str, str]:
    return {"agents.x-k8s.io/sandbox-template-ref-hash": collecting.name_hash(template)}


def claimed(uid: str) -> dict[str, str]:
    return {"agents.x-k8s.io/claim-uid": uid, "agents.x-k8s.io/sandbox-name-hash": "9f8e7d6c"}


def pod(
    name: str,
    labels: dict[str, str],
    ns: str = "agents",
    status: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": labels,
            "creationTimestamp": "2027-01-15T08:00:00Z",
        },
        "spec": {"containers": [{"name": "sandbox"}], **spec},
        "status": status or {"phase": "Pending"},
    }


def template(name: str, ns: str = "agents", runtime: str | None = "gvisor") -> dict[str, Any]:
    spec = {} if runtime is None else {"runtimeClassName": runtime}
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {"podTemplate": {"spec": spec}},
    }


def claim(
    name: str, uid: str, ns: str = "agents", pool: str = "python-gvisor", sandbox: str = ""
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"warmPoolRef": {"name": pool}},
        "status": {"sandbox": {"name": sandbox}} if sandbox else {},
    }


def sandbox(name: str, pod_name: str = "", ns: str = "agents") -> dict[str, Any]:
    """A Sandbox; its pod is named as it, or (v0.2's adopted pods) by the annotation."""
    annotations = {"agents.x-k8s.io/pod-name": pod_name} if pod_name else {}
    return {"metadata": {"name": name, "namespace": ns, "annotations": annotations}}


RUNNING = {
    "phase": "Running",
    "conditions": [{"type": "Ready", "status": "True"}],
    "containerStatuses": [{"name": "sandbox", "ready": True, "state": {"running": {}}}],
}


def waiting(reason: str, phase: str = "Pending") -> dict[str, Any]:
    state = {"waiting": {"reason": reason}}
    return {"phase": phase, "containerStatuses": [{"ready": False, "state": state}]}


# --- projections: raw pods to rows ---------------------------------------------------


def test_the_template_hash_is_agent_sandboxs_fnv1a_of_the_name():
    # the label value `kubectl get networkpolicy` shows for the template "default"
    assert collecting.name_hash("default") == "933b5bde"


@pytest.mark.parametrize(
    ("status", "extra", "expected"),
    [
        (RUNNING, {}, "Running"),
        ({"phase": "Pending"}, {}, "Pending"),
        (waiting("ContainerCreating"), {}, "ContainerCreating"),
        (waiting("CrashLoopBackOff", "Running"), {}, "CrashLoopBackOff"),
        (waiting("ErrImagePull"), {}, "ErrImagePull"),
        (
            {"phase": "Running", "containerStatuses": [{"state": {"running": {}}}]},
            {},
            "Running",  # not Ready yet: kubectl says Running, READY says 0/1
        ),
        (
            {
                "phase": "Failed",
                "containerStatuses": [{"state": {"terminated": {"reason": "OOMKilled"}}}],
            },
            {},
            "OOMKilled",
        ),
        (
            {
                "phase": "Failed",
                "containerStatuses": [{"state": {"terminated": {"exitCode": 137}}}],
            },
            {},
            "ExitCode:137",
        ),
        (
            {"phase": "Failed", "containerStatuses": [{"state": {"terminated": {"signal": 9}}}]},
            {},
            "Signal:9",
        ),
        ({"phase": "Failed", "reason": "Evicted"}, {}, "Evicted"),
        (
            {
                "phase": "Pending",
                "initContainerStatuses": [{"state": {"waiting": {"reason": "PodInitializing"}}}],
            },
            {"initContainers": [{"name": "init"}]},
            "Init:0/1",
        ),
        (
            {
                "phase": "Pending",
                "initContainerStatuses": [
                    {"state": {"terminated": {"exitCode": 0}}},
                    {"state": {"waiting": {"reason": "ImagePullBackOff"}}},
                ],
            },
            {"initContainers": [{"name": "a"}, {"name": "b"}]},
            "Init:ImagePullBackOff",
        ),
        (
            {
                "phase": "Pending",
                "initContainerStatuses": [
                    {"state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
                ],
            },
            {"initContainers": [{"name": "init"}]},
            "Init:Error",
        ),
    ],
)
def test_a_pods_status_reads_as_kubectls(status, extra, expected):
    assert collecting.pod_status(pod("p", POOL, status=status, **extra)) == expected


def test_a_running_init_container_is_a_step_and_a_started_sidecar_is_not():
    running = {"state": {"running": {}}, "started": True}
    status = {"phase": "Pending", "initContainerStatuses": [{"name": "init", **running}]}
    assert collecting.pod_status(
        pod("p", POOL, status=status, initContainers=[{"name": "init"}])
    ) == ("Init:0/1")
    sidecar = [{"name": "init", "restartPolicy": "Always"}]
    status = {**RUNNING, "initContainerStatuses": [{"name": "init", **running}]}
    assert collecting.pod_status(pod("p", POOL, status=status, initContainers=sidecar)) == "Running"


def test_a_pod_being_deleted_is_terminating():
    p = pod("p", POOL, status=RUNNING)
    p["metadata"]["deletionTimestamp"] = "2027-01-15T08:04:00Z"
    assert collecting.pod_status(p) == "Terminating"


TEMPLATES = [template("python-gvisor"), template("plain"), template("elsewhere", ns="team-x")]
CLAIMS = [
    claim("agent-run-1", "uid-1"),
    claim("agent-run-2", "uid-9", sandbox="default-x7k2p"),
    claim("agent-run-4", "uid-8", sandbox="default-q9z4w"),
]
SANDBOXES = [sandbox("default-x7k2p"), sandbox("default-q9z4w", "adopted-pod")]


@pytest.mark.parametrize(
    ("name", "labels", "expected"),
    [
        # (template, state, claim)
        (
            "python-gvisor-abcde",
            {**GRIDLOOP, **hashed("python-gvisor"), **POOL},
            ("python-gvisor", "warm", ""),
        ),
        ("plain-abcde", {**hashed("plain"), **POOL}, ("plain", "warm", "")),  # by the hash
        ("lost-abcde", {**hashed("elsewhere"), **POOL}, ("", "warm", "")),  # another namespace's
        (
            "agent-run-1",
            {**GRIDLOOP, **claimed("uid-1")},
            ("python-gvisor", "claimed", "agent-run-1"),
        ),
        # the claim's uid is unknown: the claim bound to the Sandbox the pod is named as
        (
            "default-x7k2p",
            {**GRIDLOOP, **claimed("uid-2")},
            ("python-gvisor", "claimed", "agent-run-2"),
        ),
        # or whose pod-name annotation names it
        (
            "adopted-pod",
            {**GRIDLOOP, **claimed("uid-3")},
            ("python-gvisor", "claimed", "agent-run-4"),
        ),
        ("agent-run-3", {**GRIDLOOP, **claimed("uid-7")}, ("python-gvisor", "claimed", "")),
        ("loose", {**GRIDLOOP}, ("python-gvisor", "other", "")),
    ],
)
def test_a_pods_template_state_and_claim(name, labels, expected):
    [row] = collecting.sandbox_pod_rows([pod(name, labels)], TEMPLATES, CLAIMS, SANDBOXES)
    assert (row.template, row.state, row.claim) == expected


def test_a_pod_row_carries_its_node_runtime_readiness_and_age():
    bound = pod("a", POOL, status=RUNNING, nodeName="n1", runtimeClassName="gvisor")
    plain = pod("b", POOL)  # not scheduled, no runtime class
    a, b = collecting.sandbox_pod_rows([plain, bound])
    assert (a.name, a.node, a.runtime_class, a.ready, a.ready_containers, a.containers) == (
        "a",
        "n1",
        "gvisor",
        True,
        1,
        1,
    )
    assert (b.name, b.node, b.runtime_class, b.ready, b.status) == ("b", "", "", False, "Pending")
    assert b.created == "2027-01-15T08:00:00Z"


def test_sandbox_rows_join_each_template_with_its_pool_and_claims():
    pools = [
        {
            "metadata": {"name": "python-gvisor", "namespace": "agents"},
            "spec": {"replicas": 3, "sandboxTemplateRef": {"name": "python-gvisor"}},
            "status": {"readyReplicas": 2},
        },
        {  # replicas left out: v1beta1's default, 1
            "metadata": {"name": "plain-pool", "namespace": "agents"},
            "spec": {"sandboxTemplateRef": {"name": "plain"}},
        },
    ]
    claims = [claim("c1", "u1"), claim("c2", "u2"), claim("c3", "u3", pool="plain-pool")]
    claims.append(claim("c4", "u4", pool="no-such-pool"))
    rows = collecting.sandbox_rows(TEMPLATES, pools, claims)
    assert rows == (
        Sandbox("agents", "plain", "gvisor", warm_pool=1, warm_ready=0, claims=1),
        Sandbox("agents", "python-gvisor", "gvisor", warm_pool=3, warm_ready=2, claims=2),
        Sandbox("team-x", "elsewhere", "gvisor"),
    )


# --- the view ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "age"),
    [
        (-5, "<invalid>"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (330, "5m30s"),
        (600, "10m"),
        (179 * 60 + 59, "179m"),
        (3 * 3600 + 12 * 60, "3h12m"),
        (8 * 3600 + 59 * 60, "8h"),
        (2 * 86400 + 5 * 3600, "2d5h"),
        (3 * 86400, "3d"),
        (30 * 86400, "30d"),
        (2 * 365 * 86400 + 20 * 86400, "2y20d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_ages_read_as_kubectls(seconds, age):
    assert views.kubectl_age(seconds) == age


def spod(name: str, state: str, ready: bool = True, **kw: Any) -> SandboxPod:
    status = "Running" if ready else "Pending"
    base: dict[str, Any] = dict(template="t", status=status, runtime_class="gvisor")
    return SandboxPod("agents", name, state=state, ready=ready, **{**base, **kw})


@pytest.mark.parametrize(
    ("sandbox", "pods", "summary"),
    [
        (
            Sandbox("agents", "t", "gvisor", warm_pool=1, warm_ready=1),
            [spod("w", "warm")],
            "warm 1/1 ready, 0 claimed",
        ),
        (
            Sandbox("agents", "t", "gvisor", warm_pool=2, claims=2),
            [
                spod("w1", "warm"),
                spod("w2", "warm", ready=False),
                spod("c1", "claimed"),
                spod("c2", "claimed"),
            ],
            "warm 1/2 ready, 2 claimed",
        ),
        (
            Sandbox("agents", "t", "gvisor", claims=3),
            [spod("c1", "claimed")],
            "no warm pool, 1 claimed, 2 claims without a pod",
        ),
        (
            Sandbox("agents", "t", "gvisor", claims=1),
            [spod("o", "other"), spod("c", "claimed")],
            "no warm pool, 1 claimed, 1 other",
        ),
    ],
)
def test_a_templates_row_sums_up_its_pods(sandbox, pods, summary):
    assert views.pods_summary(sandbox, pods) == summary


PRINTED = """\
SANDBOXES
NAMESPACE    TEMPLATE        POD                   STATE                                              READY   STATUS              NODE                  RUNTIME CLASS   AGE
agents       python-gvisor   -                     warm 1/2 ready, 1 claimed, 1 claim without a pod   -       -                   -                     gvisor          -
agents       python-gvisor   agent-run-1           claimed by agent-run-1                             1/1     Running             us-east-h100-000      gvisor          12m
agents       python-gvisor   python-gvisor-7xk2p   warm                                               1/1     Running             onprem-fra-a100-001   gvisor          45m
agents       python-gvisor   python-gvisor-q8m4d   warm                                               0/1     ContainerCreating   onprem-fra-a100-001   gvisor          5s
agents-dev   scratch         -                     no warm pool, 1 claimed                            -       -                   -                     runc (none)     -
agents-dev   scratch         scratch-run           claimed                                            0/1     Pending             -                     runc (none)     30s
"""  # noqa: E501 (the table as printed)


def test_the_printed_view_lists_each_template_then_its_pods():
    text = printing.as_table(SAMPLE, ["sandboxes"])
    assert text.split("\n\n", 1)[1] == PRINTED


def test_pods_without_gvisor_or_in_trouble_are_shown_red_and_starting_ones_are_not():
    pods = (
        spod("ok", "warm"),
        spod("creating", "warm", ready=False, status="ContainerCreating"),
        spod("init", "warm", ready=False, status="Init:0/1"),
        spod("unready", "claimed", ready=False, status="Running"),
        spod("runc", "warm", runtime_class=""),
        spod("crash", "claimed", ready=False, status="CrashLoopBackOff"),
        spod("oom", "claimed", ready=False, status="OOMKilled"),
    )
    snap = Snapshot(taken_at=NOW, sandbox_pods=pods)
    alerts = {r.cells[2]: r.alert for r in views.sandboxes(snap).rows}
    assert alerts == {
        "ok": False,
        "creating": False,
        "init": False,
        "unready": False,
        "runc": True,
        "crash": True,
        "oom": True,
    }


def test_a_template_without_a_runtime_class_or_a_short_pool_is_red():
    rows = {r.key: r for r in views.sandboxes(SAMPLE).rows}
    assert rows["agents/python-gvisor"].alert  # warm 1/2 ready
    assert rows["agents-dev/scratch"].alert  # runc
    assert not rows["agents/python-gvisor/agent-run-1"].alert
    assert rows["agents-dev/scratch/scratch-run"].alert


def test_pods_of_a_template_not_listed_still_show():
    snap = Snapshot(taken_at=NOW, sandbox_pods=(spod("w", "warm", template=""),))
    [row] = views.sandboxes(snap).rows
    assert row.key == "agents/?/w" and row.cells[:4] == ("agents", "?", "w", "warm")


def test_sorting_by_age_puts_the_youngest_pod_first():
    rows = views.sandboxes(SAMPLE).rows
    age = [c.title for c in views.columns("sandboxes")].index("AGE")
    assert [r.cells[2] for r in views.sorted_rows(rows, age)][:3] == [
        "python-gvisor-q8m4d",
        "scratch-run",
        "agent-run-1",
    ]


def test_json_carries_the_pods_the_filter_keeps():
    data = json.loads(printing.as_json(SAMPLE, ["sandboxes"], "runc"))
    assert [s["template"] for s in data["sandboxes"]] == ["scratch"]
    assert [p["name"] for p in data["sandboxPods"]] == ["scratch-run"]
    assert data["sandboxPods"][0]["runtimeClass"] == ""
    everything = json.loads(printing.as_json(SAMPLE, ["sandboxes"]))
    assert len(everything["sandboxPods"]) == 4 and len(everything["sandboxes"]) == 2


def test_enter_on_a_template_lists_its_pool_claims_and_pods():
    lines = views.detail(SAMPLE, "sandboxes", "agents/python-gvisor")
    assert ("warm pool", "1/2 ready (the SandboxWarmPool's status)") in lines
    assert ("claims", "2") in lines
    pods = [v for k, v in lines if k == "pod"]
    assert (
        pods[0] == "agent-run-1  claimed by agent-run-1  1/1 Running  us-east-h100-000  gvisor  12m"
    )
    assert len(pods) == 3
    pod_lines = dict(views.detail(SAMPLE, "sandboxes", "agents-dev/scratch/scratch-run"))
    assert pod_lines["runtime class"] == "runc (none)" and pod_lines["node"] == "-"
    assert views.detail(SAMPLE, "sandboxes", "agents/gone") == [("sandboxes", "agents/gone: gone")]


# --- the shell: what it lists, and a failure that stays its own ------------------------

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


class Raw:
    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.data = json.dumps({"items": items}).encode()


class FakeApi:
    """CoreV1Api, CustomObjectsApi and AppsV1Api at once, over plain dicts; `fail` names a
    call to refuse with an API error."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]], fail: dict[str, int]) -> None:
        self.objects, self.fail = objects, fail
        self.calls: list[tuple[str, str, str]] = []

    def _answer(self, call: str, ns: str = "", selector: str = "") -> list[dict[str, Any]]:
        self.calls.append((call, ns, selector))
        if call in self.fail:
            raise ApiException(status=self.fail[call], reason="Forbidden")
        return [o for o in self.objects.get(call, []) if not ns or o["metadata"]["namespace"] == ns]

    def list_cluster_custom_object(self, group, version, plural, **_):
        return {"items": self._answer(plural)}

    def list_namespaced_custom_object(self, group, version, ns, plural, **_):
        return {"items": self._answer(plural, ns)}

    def list_namespace(self, label_selector="", **_):
        return Raw(self._answer("namespaces", selector=label_selector))

    def list_namespaced_pod(self, ns, label_selector="", **_):
        return Raw(self._answer("pods", ns, label_selector))

    def list_deployment_for_all_namespaces(self, **_):
        return Raw([])

    def list_event_for_all_namespaces(self, **_):
        return Raw([])

    def read_namespaced_config_map(self, *_, **__):
        raise ApiException(status=404, reason="Not Found")


def collector(tmp_path, api: FakeApi) -> collecting.Collector:
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    c = collecting.Collector(collecting.Source(str(config)))  # no watch started
    c.core = c.custom = c.apps = api  # type: ignore[assignment]
    return c


OBJECTS: dict[str, list[dict[str, Any]]] = {
    "sandboxtemplates": [template("python-gvisor"), template("plain", ns="team-x", runtime=None)],
    "sandboxwarmpools": [],
    "sandboxclaims": [
        claim("agent-run-1", "uid-1"),
        claim("agent-run-2", "uid-20", sandbox="default-x7k2p"),
    ],
    "sandboxes": [sandbox("default-x7k2p")],
    "namespaces": [{"metadata": {"name": "agents", "namespace": ""}}],
    "pods": [
        pod("agent-run-1", {**GRIDLOOP, **claimed("uid-1")}, status=RUNNING),
        pod("default-x7k2p", {**GRIDLOOP, **claimed("uid-2")}),
        pod("plain-x1", {**hashed("plain"), **POOL}, ns="team-x"),
    ],
    "clusterqueues": [],
    "localqueues": [],
}


def test_the_shell_lists_the_sandbox_namespaces_pods_by_the_template_label(tmp_path):
    api = FakeApi(OBJECTS, {})
    c = collector(tmp_path, api)
    c._poll()
    lists = c._polled.lists
    assert lists.problems == ()
    assert ("namespaces", "", "gridloop.io/sandbox=true") in api.calls
    pod_calls = [call for call in api.calls if call[0] == "pods"]
    # the labelled namespace, and the one holding a template but not labelled
    assert pod_calls == [
        ("pods", "agents", "agents.x-k8s.io/sandbox-template-ref-hash"),
        ("pods", "team-x", "agents.x-k8s.io/sandbox-template-ref-hash"),
    ]
    # Sandboxes are read only where a claimed pod's claim uid is unknown
    assert [call for call in api.calls if call[0] == "sandboxes"] == [("sandboxes", "agents", "")]
    assert [(p.namespace, p.name, p.template, p.state, p.claim) for p in lists.sandbox_pods] == [
        ("agents", "agent-run-1", "python-gvisor", "claimed", "agent-run-1"),
        ("agents", "default-x7k2p", "python-gvisor", "claimed", "agent-run-2"),
        ("team-x", "plain-x1", "plain", "warm", ""),
    ]
    assert [s.template for s in lists.sandboxes] == ["python-gvisor", "plain"]


def test_pods_that_cannot_be_listed_keep_their_last_rows_and_say_why(tmp_path):
    api = FakeApi(OBJECTS, {})
    c = collector(tmp_path, api)
    c._poll()
    before = c._polled.lists.sandbox_pods
    api.fail = {"pods": 403}
    c._poll()
    lists = c._polled.lists
    assert dict(lists.problems) == {"sandbox-pods": "403 Forbidden"}
    assert lists.sandbox_pods == before and len(lists.sandboxes) == 2  # templates still read
    assert "sandbox-pods: 403 Forbidden" in printing.as_table(lists, ["sandboxes"]).split("\n")[1]


def test_without_agent_sandbox_no_pods_are_listed(tmp_path):
    api = FakeApi(OBJECTS, {"sandboxtemplates": 404})
    c = collector(tmp_path, api)
    c._poll()
    lists = c._polled.lists
    assert lists.absent == ("sandboxes",) and lists.sandbox_pods == ()
    assert not [call for call in api.calls if call[0] in ("pods", "namespaces")]


def test_a_cluster_without_the_sandbox_crd_names_claims_by_uid_only(tmp_path):
    api = FakeApi(OBJECTS, {"sandboxes": 404})
    c = collector(tmp_path, api)
    c._poll()
    lists = c._polled.lists
    assert lists.problems == ()
    assert [p.claim for p in lists.sandbox_pods] == ["agent-run-1", "", ""]
