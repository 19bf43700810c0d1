"""What a bundle leaves out: `render` and `install` assemble their own bundle, leave out
a component that cannot be fetched (saying why), and the chart renders the rest.

No network here: the other components come from a mirror folder and KAITO's download,
which cannot succeed on this machine, is replaced by its failure. The chart itself is
rendered by the real helm.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from chart_files import CHART
from test_bundle_command import _mirror, _objects

from gridloop import versions
from gridloop.bundle import adjustments, assembling, bundling, charting, fetching
from gridloop.bundle.bundling import Obtained
from gridloop.bundle.sources import COMPONENTS, Source
from gridloop.errors import BuildError, Unfetchable
from gridloop.local.build.building import binary

# the real helm, built by `gridloop local build`
needs_helm = pytest.mark.needs_binaries("helm")

UNFETCHABLE = "kaito"
OTHERS = tuple(c for c in COMPONENTS if c != UNFETCHABLE)
WHY = "cannot download https://example.invalid/kaito.tgz (Name or service not known)"


@pytest.fixture(autouse=True)
def offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A private cache; every component but KAITO from a mirror, and KAITO's download
    failing as it does on a machine with no route to its release host."""
    monkeypatch.setenv("GRIDLOOP_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GRIDLOOP_VERSIONS_FILE", raising=False)
    versions.load.cache_clear()
    mirror = _mirror(tmp_path / "mirror", OTHERS)
    obtain = bundling.obtain

    def from_the_mirror(source: Source, comp: versions.Component, _: Path | None) -> Obtained:
        return obtain(source, comp, None if source.component == UNFETCHABLE else mirror)

    monkeypatch.setattr(bundling, "obtain", from_the_mirror)

    def no_route(comp: versions.Component) -> bytes:
        raise Unfetchable(f"{comp.name} {comp.version}: {WHY}; pass --mirror DIR", WHY)

    monkeypatch.setattr(fetching, "download", no_route)
    yield
    versions.load.cache_clear()


def test_gridloop_bundle_still_refuses_what_it_cannot_fetch(tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=re.escape(f": {WHY}; pass --mirror DIR")):
        bundling.bundle(bundling.Request(out=tmp_path / "dist", chart=CHART))

    assert not (tmp_path / "dist").exists()


def test_an_unfetchable_component_is_left_out_with_its_reason(tmp_path: Path) -> None:
    said: list[str] = []
    request = bundling.Request(out=tmp_path / "dist", chart=CHART, leave_out_unfetchable=True)

    result = bundling.bundle(request, said.append)

    assert result.left_out == {UNFETCHABLE: WHY}
    assert [got.component.name for got in result.components] == list(OTHERS)
    upstream = result.folder / "upstream"
    assert (upstream / UNFETCHABLE / bundling.LEFT_OUT).read_text() == WHY + "\n"
    assert not list((upstream / UNFETCHABLE).glob("*.yaml"))
    assert any(line.endswith(f"left out: {WHY}") for line in said)


def test_a_skipped_component_is_marked_left_out_too(tmp_path: Path) -> None:
    request = bundling.Request(out=tmp_path / "dist", chart=CHART, skip=frozenset({UNFETCHABLE}))

    result = bundling.bundle(request)

    assert result.left_out == {UNFETCHABLE: "left out with --skip"}
    assert (result.folder / "upstream" / UNFETCHABLE / bundling.LEFT_OUT).is_file()


def test_a_bundle_with_everything_is_reused_and_one_missing_a_part_is_made_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = assembling.assemble(lambda _m: None)
    second = assembling.assemble(lambda _m: None)

    assert first.left_out == second.left_out == {UNFETCHABLE: WHY}
    assert not second.reused  # KAITO may be fetchable next time: it is tried again
    assert (first.chart / "Chart.yaml").is_file()

    monkeypatch.setattr(fetching, "download", lambda comp: b"")  # now it "downloads"
    monkeypatch.setattr(
        fetching, "_render_chart", lambda *a: yaml.safe_dump_all(_objects(UNFETCHABLE))
    )
    complete = assembling.assemble(lambda _m: None)
    reused = assembling.assemble(lambda _m: None)

    assert complete.left_out == {} and not complete.reused
    assert reused.reused and reused.chart == complete.chart
    assert (reused.chart / "upstream" / UNFETCHABLE / f"{UNFETCHABLE}.yaml").is_file()


def test_the_bundle_is_keyed_by_the_charts_files(tmp_path: Path) -> None:
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    before = assembling.key(chart)
    (chart / "upstream" / "kueue").mkdir(parents=True)
    (chart / "upstream" / "kueue" / "kueue.yaml").write_text("kind: Old\n")

    assert assembling.key(chart) == before  # what an old bundle left in the source: ignored

    with (chart / "values.yaml").open("a") as values:
        values.write("\n# changed\n")
    assert assembling.key(chart) != before


def test_the_bundle_is_keyed_by_the_edits_it_makes_to_upstream(tmp_path: Path, monkeypatch) -> None:
    """A cached bundle made before an edit changed (adjustments.py) is made again."""
    before = assembling.key(CHART)
    edits = tmp_path / "adjustments.py"
    edits.write_bytes(Path(adjustments.__file__).read_bytes() + b"\n# changed\n")
    monkeypatch.setattr(adjustments, "__file__", str(edits))

    assert assembling.key(CHART) != before


# --- the chart renders what the bundle has ---


@pytest.fixture(scope="module")
def helm() -> Path:
    """Found before the private cache of `offline` hides the built one."""
    return binary("helm")


def _helm(helm: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "HOME": str(home),
        "PATH": "/usr/bin:/bin",
        "KUBECONFIG": os.devnull,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    return subprocess.run([str(helm), *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def left_out_chart(tmp_path: Path) -> Path:
    request = bundling.Request(out=tmp_path / "dist", chart=CHART, leave_out_unfetchable=True)
    return bundling.bundle(request).folder


@needs_helm
def test_the_chart_renders_without_what_was_left_out(
    helm: Path, left_out_chart: Path, tmp_path: Path
) -> None:
    done = _helm(
        helm, tmp_path, "template", "gridloop", str(left_out_chart), "-n", "gridloop-system"
    )

    assert done.returncode == 0, done.stderr
    sources = set(re.findall(r"^# Source: upstream upstream/([^/]+)/", done.stdout, re.M))
    assert UNFETCHABLE not in sources
    assert sources >= {"kueue", "agent-sandbox"}


@needs_helm
def test_the_notes_say_what_was_left_out(helm: Path, left_out_chart: Path, tmp_path: Path) -> None:
    args = ["install", "gridloop", str(left_out_chart), "-n", "gridloop-system"]
    done = _helm(helm, tmp_path, *args, "--dry-run=client")

    assert done.returncode == 0, done.stderr
    notes = done.stdout.split("NOTES:", 1)[1]
    assert (
        f"WARNING: This bundle left {UNFETCHABLE} out ({WHY}): kaito.enabled is true, but" in notes
    )


@needs_helm
def test_a_chart_missing_a_component_it_does_not_say_it_left_out_still_fails(
    helm: Path, left_out_chart: Path, tmp_path: Path
) -> None:
    (left_out_chart / "upstream" / UNFETCHABLE / bundling.LEFT_OUT).unlink()

    done = _helm(helm, tmp_path, "template", "gridloop", str(left_out_chart))

    assert done.returncode != 0
    assert "kaito.enabled is true but this chart has no upstream KAITO manifests" in done.stderr


def test_the_repo_chart_is_not_where_the_bundle_is_written() -> None:
    assert assembling.folder(charting.read(CHART), "k").is_relative_to(
        Path(os.environ["GRIDLOOP_CACHE"])
    )


@needs_helm
def test_the_notes_say_nothing_of_a_left_out_component_the_values_turn_off(
    helm: Path, left_out_chart: Path, tmp_path: Path
) -> None:
    args = ["install", "gridloop", str(left_out_chart), "--set", "kaito.enabled=false"]
    done = _helm(helm, tmp_path, *args, "--dry-run=client")

    assert done.returncode == 0, done.stderr
    assert "left kaito out" not in done.stdout


def test_the_chart_knows_every_component_the_bundle_adds() -> None:
    """upstream.yaml emits, NOTES.txt reports and doctor maps to values keys the same
    components the bundle writes (gridloop.upstreamComponents in _helpers.tpl)."""
    from gridloop.chart.planning import VALUES_KEY

    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    define = helpers.split('define "gridloop.upstreamComponents"', 1)[1].split("{{- end }}", 1)[0]
    pairs = re.findall(r'"key" "([^"]+)" "dir" "([^"]+)"', define)

    assert [d for _, d in pairs] == list(COMPONENTS)
    assert {d: k for k, d in pairs if k != d} == VALUES_KEY
