"""One fixed Snapshot of a small fleet in trouble, for the UI's snapshot tests: a node
quarantined for XID 79, one cordoned by hand, one whose exporter is down, a queue whose
quota the health service lowered, a model rolling out, a sandbox warm pool refilling
and a sandbox pod running without gVisor."""

from __future__ import annotations

from gridloop.status.snapshot import (
    Breaker,
    Event,
    FlavorQuota,
    Model,
    Node,
    Queue,
    Sandbox,
    SandboxPod,
    Snapshot,
)

TAKEN_AT = 1_800_000_300.0  # five minutes after 2027-01-15T08:00:00Z


def _node(name: str, site: str, pool: str, **kw) -> Node:
    product = {"h100": "NVIDIA-H100-80GB-HBM3", "a100": "NVIDIA-A100-SXM4-80GB"}[pool]
    base = dict(region=site, product=product, gpus=8, exporter_up=True, reporting=8)
    return Node(name=name, site=site, pool=pool, **{**base, **kw})


SAMPLE = Snapshot(
    taken_at=TAKEN_AT,
    context="gridloop-local",
    nodes=(
        _node("eu-west-a100-000", "eu-west", "a100", allocated=8),
        _node("eu-west-a100-001", "eu-west", "a100", exporter_up=False, reporting=None),
        _node("onprem-fra-a100-000", "onprem-fra", "a100", unschedulable=True),
        _node("onprem-fra-a100-001", "onprem-fra", "a100", allocated=4),
        _node("us-east-h100-000", "us-east", "h100", allocated=8),
        _node(
            "us-east-h100-002",
            "us-east",
            "h100",
            unschedulable=True,
            quarantined_by="gridloop-health",
            reason="xid-79 on GPU 3 (GPU-f4ae383c)",
            faulty=("GPU-f4ae383c",),
            quarantined_at="2027-01-15T08:00:00Z",
            taints=("gridloop.io/gpu-unhealthy=true:NoSchedule",),
        ),
    ),
    queues=(
        Queue(
            name="team-research",
            cohort="gridloop",
            flavors=(
                FlavorQuota("us-east-h100", nominal=8, usage=8, configured=16),
                FlavorQuota("eu-west-a100", nominal=16, usage=8),
            ),
            pending=2,
            admitted=2,
            local_queues=("team-research/default",),
        ),
        Queue(
            name="team-serving",
            cohort="gridloop",
            flavors=(FlavorQuota("onprem-fra-a100", nominal=16, usage=4),),
            admitted=1,
        ),
    ),
    models=(
        Model(
            namespace="inference",
            name="llama-3-8b",
            kind="Deployment",
            replicas=2,
            ready=1,
            endpoint="http://gridloop-model-llama-3-8b.inference.svc:8000/v1",
            load_format="runai_streamer",
            revision="r7",
            gpus=2,
            serving=("r7", "r6"),
        ),
        Model(
            namespace="inference",
            name="tiny",
            kind="Deployment",
            replicas=1,
            ready=1,
            endpoint="http://tiny.inference.svc:8000/v1",
            load_format="runai_streamer",
            revision="r3",
            serving=("r2",),
            stuck="no weights at s3://models/tiny/r3/: the server found no model files there"
            " (CrashLoopBackOff, 4 restarts)",
        ),
    ),
    sandboxes=(
        Sandbox("agents", "python-gvisor", "gvisor", warm_pool=2, warm_ready=1, claims=2),
        Sandbox("agents-dev", "scratch", "", claims=1),
    ),
    sandbox_pods=(
        SandboxPod(
            "agents",
            "agent-run-1",
            "python-gvisor",
            "claimed",
            claim="agent-run-1",
            status="Running",
            ready=True,
            ready_containers=1,
            containers=1,
            node="us-east-h100-000",
            runtime_class="gvisor",
            created="2027-01-15T07:53:00Z",
        ),
        SandboxPod(
            "agents",
            "python-gvisor-7xk2p",
            "python-gvisor",
            "warm",
            status="Running",
            ready=True,
            ready_containers=1,
            containers=1,
            node="onprem-fra-a100-001",
            runtime_class="gvisor",
            created="2027-01-15T07:20:00Z",
        ),
        SandboxPod(
            "agents",
            "python-gvisor-q8m4d",
            "python-gvisor",
            "warm",
            status="ContainerCreating",
            containers=1,
            node="onprem-fra-a100-001",
            runtime_class="gvisor",
            created="2027-01-15T08:04:55Z",
        ),
        SandboxPod(
            "agents-dev",
            "scratch-run",
            "scratch",
            "claimed",
            status="Pending",
            containers=1,
            created="2027-01-15T08:04:30Z",
        ),
    ),
    events=(
        Event(
            "2027-01-15T08:00:00Z",
            "Warning",
            "GPUQuarantined",
            "Node/us-east-h100-002",
            "quarantined by gridloop-health: xid-79 on GPU 3 (GPU-f4ae383c)",
        ),
        Event(
            "2027-01-15T08:00:02Z",
            "Normal",
            "GPUQuotaLowered",
            "ClusterQueue/team-research",
            "us-east-h100: 16 -> 8 GPUs (healthy GPUs in the flavor: 8)",
        ),
    ),
    breaker=Breaker(found=True),
)
