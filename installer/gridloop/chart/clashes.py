"""doctor's clash checks (pure): another controller, or another owner's object, where
the chart would put its own.

Two Kueue controllers act on the same ClusterQueues; Helm refuses to take over an object
another release (or nobody) owns. A controller that runs outside the chart is fine when
the chart leaves its own off, and needed when the chart renders objects only it acts on.
"""

from __future__ import annotations

from gridloop.chart.diagnosis import Check, Component, Observed, Planned, Status, few, unread

COMPONENTS: tuple[Component, ...] = (
    Component(
        "kueue",
        "Kueue",
        ("kueue-controller-manager",),
        "kueue/kueue",
        "kueue-",
        frozenset({"ClusterQueue", "LocalQueue", "ResourceFlavor", "Cohort"}),
    ),
    Component(
        "kuberay",
        "KubeRay",
        ("kuberay-operator",),
        "kuberay/operator",
        kinds=frozenset({"RayCluster", "RayJob", "RayService"}),
    ),
    Component(
        "kaito",
        "KAITO",
        ("kaito-workspace",),
        "kaito/workspace",
        kinds=frozenset({"Workspace"}),
    ),
    Component(
        "gpu-operator",
        "NVIDIA GPU Operator",
        ("gpu-operator",),
        "nvidia/gpu-operator",
        installable=False,
    ),
)


def _tag(image: str) -> str:
    ref = image.split("@", 1)[0]
    last = ref.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else ""


def component(comp: Component, observed: Observed, planned: Planned) -> Check:
    """Someone else's controller beside the chart's is a clash; the chart's controller off
    while its objects are rendered needs one that runs elsewhere."""
    name = comp.key
    if observed.workloads is None:
        return unread(name, "deployments", observed)
    mine = [
        w
        for w in observed.workloads
        if w.name in comp.deployments or any(comp.image in i for i in w.images)
    ]
    foreign = [
        w for w in mine if (w.release, w.release_namespace) != (planned.release, planned.namespace)
    ]
    hooks = [
        h
        for h in observed.webhooks or ()
        if comp.webhook_prefix and h.startswith(comp.webhook_prefix)
    ]
    where = [f"{w.namespace}/{w.name}" for w in foreign]
    versions = sorted(
        {t for w in foreign for i in w.images if comp.image in i for t in [_tag(i)] if t}
    )
    seen = ", ".join(where) or (f"webhooks {', '.join(hooks)}" if hooks else "")
    shown_version = f" {'/'.join(versions)}" if versions else ""
    enabled = comp.installable and planned.enabled.get(comp.key, False)
    pinned = planned.pinned.get(comp.key, "")
    used = sorted(planned.kinds & comp.kinds)
    if not comp.installable:
        if not seen:
            return Check(name, Status.PASS, f"{comp.title} not found")
        if planned.enabled.get("dcgmExporter", False):
            return Check(
                name,
                Status.WARN,
                f"{comp.title}{shown_version} runs ({seen}) with its own DCGM exporter; the "
                "chart would add a second one on every GPU node",
                "set dcgmExporter.enabled=false",
            )
        return Check(name, Status.PASS, f"{comp.title}{shown_version} runs ({seen})")
    left = planned.left_out.get(comp.key)
    if enabled and left is not None:
        return _left_out(comp, left, seen, used)
    if enabled and foreign:
        return Check(
            name,
            Status.FAIL,
            f"{comp.title}{shown_version} already runs ({seen}), not from release "
            f"{planned.release}: two controllers would act on the same objects",
            f"set {comp.key}.enabled=false to use that one, or uninstall it first",
        )
    if enabled:
        return Check(name, Status.PASS, f"installed by this chart ({comp.title} {pinned})")
    if seen:
        if versions and pinned and pinned not in versions:
            return Check(
                name,
                Status.WARN,
                f"{comp.title}{shown_version} runs outside the chart ({seen}); the install "
                f"applies {comp.title} {pinned}'s CRDs over its own",
                f"upgrade it to {pinned}, or bundle without it (gridloop bundle --skip {comp.key})",
            )
        return Check(
            name,
            Status.PASS,
            f"{comp.title}{shown_version} runs outside the chart ({seen}); "
            f"{comp.key}.enabled=false leaves it alone",
        )
    if used:
        return Check(
            name,
            Status.WARN,
            f"{comp.title} is not installed and {comp.key}.enabled=false: nothing acts on "
            f"the {', '.join(used)} objects the chart creates",
            f"install {comp.title}, or set {comp.key}.enabled=true",
        )
    return Check(name, Status.PASS, f"{comp.title} off and not needed")


def _left_out(comp: Component, why: str, seen: str, used: list[str]) -> Check:
    """The values turn it on, the bundle does not have it."""
    if seen:
        return Check(
            comp.key,
            Status.PASS,
            f"{comp.title} runs outside the chart ({seen}); this bundle left it out ({why})",
        )
    needs = f": nothing acts on the {', '.join(used)} objects the chart creates" if used else ""
    return Check(
        comp.key,
        Status.WARN,
        f"{comp.title} is left out of this bundle ({why}) and not installed{needs}",
        f"a bundle that has it: `gridloop bundle --mirror DIR --tarball`, then --bundle FILE; "
        f"or set {comp.key}.enabled=false",
    )


def free_names(observed: Observed, planned: Planned) -> Check:
    """Helm refuses to take over an object another release (or nobody) owns."""
    name = "free-names"
    if observed.existing is None:
        return unread(name, "the chart's objects", observed)
    ours = (planned.release, planned.namespace)
    taken = [e for e in observed.existing if (e.release, e.release_namespace) != ours]
    if taken:
        owners = sorted({(e.release, e.release_namespace) for e in taken if e.release})
        where = ", ".join(f"release {r} (namespace {ns})" for r, ns in owners)
        if all(e.kept and e.release for e in taken):
            # namespaces and the like an uninstall leaves behind on purpose, with what
            # users made in them: Helm lets only a release of the same name take them back
            fix = (
                f"they outlive an uninstall (helm.sh/resource-policy: keep): install as "
                f"{where} to take them back, or delete them"
            )
        elif owners:
            fix = f"uninstall {where}, or choose another --release"
        else:
            fix = (
                f"delete them, or let release {planned.release} adopt them (label "
                "app.kubernetes.io/managed-by=Helm, annotate meta.helm.sh/release-name and "
                "meta.helm.sh/release-namespace)"
            )
        labels = [e.label() + (f" (release {e.release})" if e.release else "") for e in taken]
        return Check(
            name,
            Status.FAIL,
            f"{len(taken)} objects the chart creates already exist and are not release "
            f"{planned.release}'s: {few(labels)}",
            fix,
            tuple(labels),
        )
    present = len(observed.existing)
    if present:
        return Check(name, Status.PASS, f"{present} objects exist from this release: updated")
    return Check(name, Status.PASS, "every name the chart uses is free")
