"""`gridloop bundle` offline: mirrors, --skip, the cache, the chart copy and one-line errors.

No network and no upstream tool runs here: every component comes from a
mirror folder or a prepared cache entry (see test_bundle_upstream.py for the
real Kueue and KubeRay renderings).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gridloop import versions
from gridloop.bundle import bundling, caching, charting
from gridloop.bundle.sources import COMPONENTS, Kind, source_for
from gridloop.errors import BuildError, UsageError

KEEP = {"helm.sh/resource-policy": "keep"}


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A private cache, the repo's versions file, and no chart unless a test makes one."""
    monkeypatch.setenv("GRIDLOOP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GRIDLOOP_VERSIONS_FILE", raising=False)
    monkeypatch.setattr(charting, "REPO_CHART", tmp_path / "no-chart-here")
    versions.load.cache_clear()
    yield
    versions.load.cache_clear()


def _objects(component: str) -> list[dict[str, object]]:
    """A mirrored component: what the bundle's edits need (adjustments.integrate).

    Where upstream moves to the release namespace from one of its own (KubeRay's
    `default`, KAITO's `kaito-workspace`), the objects sit there; Kueue has its controller
    config, mounted by its Deployment.
    """
    namespace = source_for(component).release_namespace_from or f"{component}-system"
    # agent-sandbox's controller with the flag its extensions (SandboxTemplate) need
    name = "agent-sandbox-controller" if component == "agent-sandbox" else component
    args = ["--extensions"] if component == "agent-sandbox" else []
    container = name
    pin = source_for(component).pin
    if source_for(component).kind is Kind.HELM_CHART and pin is not None:
        name, container = pin.name, pin.container  # a chart's rendering gets its image pinned
    workload = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": container, "image": f"mirror/{component}:1", "args": args}
                    ],
                    "volumes": [{"name": "config", "configMap": {"name": "kueue-manager-config"}}],
                }
            }
        },
    }
    objects: list[dict[str, object]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{component}-system"}},
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"things.{component}.example", "annotations": {"a": "b"}},
        },
        workload,
    ]
    if component == "kueue":
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "kueue-manager-config", "namespace": namespace},
                "data": {"controller_manager_config.yaml": "kind: Configuration\n"},
            }
        )
    return objects


def _mirror(root: Path, components: tuple[str, ...] = COMPONENTS) -> Path:
    for component in components:
        folder = root / component
        folder.mkdir(parents=True)
        namespace, crd_first, *rest = _objects(component)
        rest = [namespace, *rest]
        (folder / "a-crds.yaml").write_text(yaml.safe_dump(crd_first))
        (folder / "b-rest.yml").write_text(yaml.safe_dump_all(rest))
        (folder / "README.md").write_text("not a manifest")
    return root


def _chart(root: Path) -> Path:
    (root / "policies").mkdir(parents=True)
    (root / "policies" / "health.yaml").write_text("xid: {}\n")
    chart = root / "chart"
    (chart / "files").mkdir(parents=True)
    (chart / "templates").mkdir()
    (chart / "upstream" / "stale").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(
        "apiVersion: v2\nname: gridloop\nversion: 0.3.0\nappVersion: 0.1.0\n"
    )
    (chart / "values.yaml").write_text(
        "health:\n  image:\n    repository: ghcr.io/gridloop/health\n    tag: ''\n"
    )
    (chart / "templates" / "upstream.yaml").write_text(
        '{{ .Files.Glob "upstream/kueue/*.yaml" }}\n'
    )
    (chart / "files" / "health.yaml").symlink_to(root / "policies" / "health.yaml")
    return chart


def test_a_mirrored_bundle_has_the_chart_every_component_and_its_images(tmp_path: Path) -> None:
    out = tmp_path / "dist"

    result = bundling.bundle(
        bundling.Request(out=out, chart=_chart(tmp_path), mirror=_mirror(tmp_path / "mirror"))
    )

    bundle = out / "gridloop"
    assert result.folder == bundle
    assert (bundle / "templates" / "upstream.yaml").is_file()
    health = bundle / "files" / "health.yaml"
    assert not health.is_symlink() and health.read_text() == "xid: {}\n"
    assert not (bundle / "upstream" / "stale").exists()
    assert sorted(p.name for p in (bundle / "crds").iterdir()) == sorted(
        f"{c}.yaml" for c in COMPONENTS
    )
    for component in COMPONENTS:
        folder = bundle / "upstream" / component
        (crd,) = yaml.safe_load_all((bundle / "crds" / f"{component}.yaml").read_text())
        assert crd["metadata"]["annotations"] == {"a": "b", **KEEP}
        namespace, workload = yaml.safe_load_all((folder / f"{component}.yaml").read_text())
        assert namespace["metadata"]["annotations"] == KEEP
        assert workload["kind"] == _objects(component)[2]["kind"]
    assert (out / "images.txt").read_text().splitlines() == [
        "ghcr.io/gridloop/health:0.1.0",
        *sorted(f"mirror/{c}:1" for c in COMPONENTS),
    ]
    assert [got.origin for got in result.components] == ["mirror"] * len(COMPONENTS)


def test_mirrored_manifests_get_the_edits_that_tie_them_to_the_chart(tmp_path: Path) -> None:
    out = tmp_path / "dist"

    bundling.bundle(bundling.Request(out=out, mirror=_mirror(tmp_path / "mirror")))

    upstream = out / "gridloop" / "upstream"
    assert sorted(p.name for p in (upstream / "kueue").iterdir()) == ["bases", "kueue.yaml"]
    (base,) = yaml.safe_load_all(
        (upstream / "kueue" / "bases" / "configmap-kueue-manager-config.yaml").read_text()
    )
    assert base["metadata"]["name"] == "kueue-manager-config"
    _, kuberay = yaml.safe_load_all((upstream / "kuberay" / "kuberay.yaml").read_text())
    assert kuberay["metadata"]["namespace"] == "${GRIDLOOP_RELEASE_NAMESPACE}"
    # nothing but the edits: the image an operator mirrored stays
    (container,) = kuberay["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "mirror/kuberay:1"


def test_skipped_components_are_left_out_of_the_bundle_and_its_images(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    mirror = _mirror(tmp_path / "mirror", ("kueue", "kuberay"))
    (out / "gridloop" / "upstream" / "kaito").mkdir(parents=True)  # from an earlier bundle
    (out / "notes.txt").parent.mkdir(exist_ok=True)
    (out / "notes.txt").write_text("mine")

    bundling.bundle(
        bundling.Request(out=out, mirror=mirror, skip=frozenset({"kaito", "agent-sandbox"}))
    )

    upstream = out / "gridloop" / "upstream"
    assert sorted(p.parent.name for p in upstream.glob("*/*.yaml")) == ["kuberay", "kueue"]
    assert (upstream / "kaito" / bundling.LEFT_OUT).read_text() == "left out with --skip\n"
    assert (out / "images.txt").read_text() == "mirror/kuberay:1\nmirror/kueue:1\n"
    assert (out / "notes.txt").read_text() == "mine", "only the bundle's own files are replaced"


def test_a_cached_rendering_is_used_without_fetching_and_then_adjusted(tmp_path: Path) -> None:
    kueue = versions.get("kueue")
    rendered = _objects("kueue")
    rendered[2]["metadata"] = {"name": "kueue-controller-manager", "namespace": "kueue-system"}
    rendered[2]["spec"]["template"]["spec"]["containers"][0]["name"] = "manager"
    caching.write(source_for("kueue"), kueue, yaml.safe_dump_all(rendered))
    out = tmp_path / "dist"

    result = bundling.bundle(bundling.Request(out=out, skip=frozenset(COMPONENTS) - {"kueue"}))

    assert [got.origin for got in result.components] == ["cached"]
    assert result.images == [f"registry.k8s.io/kueue/kueue:{kueue.version}"]
    _, deployment = yaml.safe_load_all(
        (out / "gridloop" / "upstream" / "kueue" / "kueue.yaml").read_text()
    )
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {"gridloop.io/config-checksum": "${GRIDLOOP_CONFIG_CHECKSUM}"}


def test_without_a_chart_yet_only_the_upstream_manifests_are_bundled(tmp_path: Path) -> None:
    said: list[str] = []
    request = bundling.Request(
        out=tmp_path / "dist",
        mirror=_mirror(tmp_path / "mirror", ("kueue",)),
        skip=frozenset(COMPONENTS) - {"kueue"},
    )

    result = bundling.bundle(request, say=said.append)

    assert result.chart is None
    assert (tmp_path / "dist" / "gridloop" / "crds" / "kueue.yaml").is_file()
    assert (tmp_path / "dist" / "gridloop" / "upstream" / "kueue" / "kueue.yaml").is_file()
    assert any("no chart at" in line for line in said)
    with pytest.raises(UsageError, match="--tarball: needs the chart"):
        bundling.bundle(
            bundling.Request(
                out=request.out, mirror=request.mirror, skip=request.skip, tarball=True
            )
        )


def test_a_bad_mirror_file_names_the_component_and_the_file(tmp_path: Path) -> None:
    mirror = _mirror(tmp_path / "mirror", ("kuberay",))
    (mirror / "kuberay" / "c-broken.yaml").write_text("kind: [unclosed\n")

    with pytest.raises(BuildError) as caught:
        bundling.bundle(
            bundling.Request(
                out=tmp_path / "dist", mirror=mirror, skip=frozenset(COMPONENTS) - {"kuberay"}
            )
        )

    assert str(caught.value).startswith(f"kuberay {versions.get('kuberay').version}: ")
    assert "c-broken.yaml" in str(caught.value) and "invalid YAML" in str(caught.value)
    assert not (tmp_path / "dist").exists(), "nothing is written when a component fails"


def test_bundling_a_bundle_drops_its_upstream_crds_but_keeps_the_charts_own(
    tmp_path: Path,
) -> None:
    chart = _chart(tmp_path)
    (chart / "crds").mkdir()
    (chart / "crds" / "kaito.yaml").write_text("stale: from an earlier bundle\n")
    (chart / "crds" / "gridloop.yaml").write_text("own: true\n")
    mirror = _mirror(tmp_path / "mirror", ("kueue",))

    bundling.bundle(
        bundling.Request(
            out=tmp_path / "dist",
            chart=chart,
            mirror=mirror,
            skip=frozenset(COMPONENTS) - {"kueue"},
        )
    )

    crds = tmp_path / "dist" / "gridloop" / "crds"
    assert sorted(p.name for p in crds.iterdir()) == ["gridloop.yaml", "kueue.yaml"]


def test_out_may_not_overwrite_the_chart_it_copies(tmp_path: Path) -> None:
    chart = _chart(tmp_path)
    (tmp_path / "gridloop").symlink_to(chart)

    with pytest.raises(UsageError, match="would overwrite the chart"):
        bundling.bundle(bundling.Request(out=tmp_path, chart=tmp_path / "gridloop"))


# The command line: one line, exit 2 for bad flags, exit 1 for a component it cannot get.


def _one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    return lines[0]


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return dict(os.environ, GRIDLOOP_CACHE=str(tmp_path / "cache"), **extra)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--skip", "volcano"], "--skip volcano: not an upstream component (kueue, kuberay,"),
        (["--mirror", "no/such/dir"], "--mirror no/such/dir: no such directory"),
        (["--chart", "no/such/chart"], "--chart no/such/chart: no Chart.yaml there"),
        (["--digests-from", "ftp://x"], "--digests-from ftp://x: not a registry URL"),
        (["--digests-from", "local"], "--digests-from local: no local cluster with a registry"),
    ],
    ids=["unknown-component", "missing-mirror", "missing-chart", "not-a-registry", "no-cluster"],
)
def test_bad_flags_are_one_line_and_exit_2(tmp_path: Path, gridloop, flags, expected) -> None:
    env = _env(tmp_path, GRIDLOOP_STATE=str(tmp_path / "no-cluster"))
    result = gridloop("bundle", "--out", str(tmp_path / "dist"), *flags, env=env)

    assert result.returncode == 2
    assert expected in _one_error_line(result.stderr)
    assert not (tmp_path / "dist").exists()


def test_out_being_a_file_is_refused(tmp_path: Path, gridloop) -> None:
    (tmp_path / "dist").write_text("a file")

    result = gridloop("bundle", "--out", str(tmp_path / "dist"), env=_env(tmp_path))

    assert result.returncode == 2
    assert "--out" in _one_error_line(result.stderr)


def test_an_unreachable_release_names_the_component_and_the_ways_around_it(
    tmp_path: Path, gridloop
) -> None:
    pinned = tmp_path / "versions.yaml"
    text = (Path(__file__).parents[2] / "versions.yaml").read_text()
    text = text.replace("https://github.com/kaito-project/kaito", "http://127.0.0.1:9")
    assert '  sha256: ""\n' in text  # KAITO's chart: a download needs its hash pinned
    pinned.write_text(text.replace('  sha256: ""\n', f'  sha256: "{"0" * 64}"\n'))
    env = _env(tmp_path, GRIDLOOP_VERSIONS_FILE=str(pinned))
    skip = [flag for c in ("kueue", "kuberay", "agent-sandbox") for flag in ("--skip", c)]

    result = gridloop("bundle", "--out", str(tmp_path / "dist"), *skip, env=env)

    assert result.returncode == 1
    line = _one_error_line(result.stderr)
    kaito = versions.get("kaito").version
    assert line.startswith(f"error: kaito {kaito}: cannot download http://127.0.0.1:9/")
    assert "--mirror DIR" in line and "--skip kaito" in line
    assert not (tmp_path / "dist").exists()


def test_the_command_reports_each_component_and_what_it_wrote(tmp_path: Path, gridloop) -> None:
    mirror = _mirror(tmp_path / "mirror")
    chart = _chart(tmp_path)
    out = tmp_path / "dist"

    result = gridloop(
        "bundle",
        "--out",
        str(out),
        "--mirror",
        str(mirror),
        "--chart",
        str(chart),
        env=_env(tmp_path),
    )

    assert result.returncode == 0, result.stderr
    assert (
        f"  ✓ kueue {versions.get('kueue').version}" in result.stdout
        and "mirror (3 objects)" in result.stdout
    )
    assert f"wrote {out / 'gridloop'} (chart 0.3.0, 4 upstream components)" in result.stdout
    assert f"wrote {out / 'images.txt'} (5 images)" in result.stdout


def _sandbox_release(tmp_path: Path, core: str, extensions: str) -> bundling.Request:
    """A bundle of agent-sandbox alone from a mirror of its two release files, as its
    release script writes them: both hold the controller Deployment, the second with
    --extensions."""

    def controller(*args: str) -> dict[str, object]:
        container = {"name": "agent-sandbox-controller", "image": "mirror/sb:1", "args": args}
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "agent-sandbox-controller", "namespace": "agent-sandbox-system"},
            "spec": {"template": {"spec": {"containers": [container]}}},
        }

    folder = tmp_path / "mirror" / "agent-sandbox"
    folder.mkdir(parents=True)
    (folder / core).write_text(yaml.safe_dump(controller("--leader-elect=true")))
    (folder / extensions).write_text(
        yaml.safe_dump(controller("--leader-elect=true", "--extensions"))
    )
    skip = frozenset(COMPONENTS) - {"agent-sandbox"}
    return bundling.Request(out=tmp_path / "dist", mirror=tmp_path / "mirror", skip=skip)


def test_a_sandbox_mirror_read_in_the_wrong_order_fails_naming_the_missing_flag(
    tmp_path: Path,
) -> None:
    request = _sandbox_release(tmp_path, "manifest.yaml", "extensions.yaml")

    with pytest.raises(BuildError) as failed:
        bundling.bundle(request)

    version = versions.get("agent-sandbox").version
    assert str(failed.value).startswith(
        f"agent-sandbox {version}: Deployment 'agent-sandbox-controller' runs "
        "'agent-sandbox-controller' without --extensions, which the chart's objects need: "
    )
    assert "(1-manifest.yaml, 2-extensions.yaml)" in str(failed.value)
    assert not (tmp_path / "dist").exists()


def test_a_sandbox_mirror_in_apply_order_keeps_the_extensions_controller_once(
    tmp_path: Path,
) -> None:
    request = _sandbox_release(tmp_path, "1-manifest.yaml", "2-extensions.yaml")

    result = bundling.bundle(request)

    emitted = result.folder / "upstream" / "agent-sandbox" / "agent-sandbox.yaml"
    (deployment,) = list(yaml.safe_load_all(emitted.read_text()))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["args"] == ["--leader-elect=true", "--extensions"]
