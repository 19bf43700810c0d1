"""The images built from upstream Python programs (images/python_images.py) and the chart
that runs them: one name for each, and their Containerfiles beside the repository's."""

from __future__ import annotations

from pathlib import Path

import yaml

from gridloop import versions
from gridloop.local.build.images import python_images, table

REPO = Path(__file__).resolve().parents[2]


def values() -> dict:
    return yaml.safe_load((REPO / "charts" / "gridloop" / "values.yaml").read_text())


def test_the_chart_runs_the_sandbox_images_the_local_build_makes() -> None:
    sandbox = values()["agentSandbox"]
    runtime = python_images.by_name(python_images.RUNTIME)

    assert sandbox["template"]["image"] == runtime.ref
    # the router is agent-sandbox's Go one, built from the module like the controllers
    assert sandbox["router"]["image"] == table.router_ref()
    assert table.router() in table.images("3.10")


def test_every_row_of_the_image_table_is_made_of_binaries_the_build_makes() -> None:
    from gridloop.local.build.images import pushing

    for image in table.images("3.10"):
        assert set(image.files.values()) <= set(pushing.BINARIES), image.ref


def test_each_image_is_tagged_with_the_version_of_the_module_it_is_built_from() -> None:
    for image in python_images.IMAGES:
        assert image.ref.endswith(":" + versions.get(image.component).version)
        assert image.component == "agent-sandbox"


def test_each_image_has_its_containerfile_and_own_files_in_the_repository() -> None:
    for image in python_images.IMAGES:
        folder = REPO / "images" / image.name
        assert (folder / "Containerfile").is_file()
        for name in image.own_files:
            assert (folder / name).is_file()
        text = (folder / "Containerfile").read_text()
        for name in (*image.files, *image.own_files):
            assert name in text, f"{image.name}'s Containerfile copies {name}"
        assert "--require-hashes" in text, "upstream's pins are checked again in the build"
        assert "USER 1000:1000" in text


def _pins(text: str) -> dict[str, str]:
    return dict(
        line.split(" ")[0].split("==")
        for line in text.splitlines()
        if "==" in line and not line.startswith("#")
    )


def test_a_lock_of_ours_keeps_every_upstream_pin_it_can_and_says_which_it_cannot() -> None:
    from gridloop.bundle import modules

    for image in python_images.IMAGES:
        if not image.lock:
            continue
        ours = (REPO / "images" / image.name / image.requirements).read_text()
        folder = modules.module_dir(versions.get(image.component)) / image.folder
        theirs = _pins((folder / image.requirements).read_text())
        changed = {name for name, pin in _pins(ours).items() if theirs.get(name) != pin}
        assert _pins(ours).keys() == theirs.keys(), "the same packages as upstream's lock"
        assert changed == {"numpy", "scipy"}, changed
        header = "\n".join(line for line in ours.splitlines() if line.startswith("# "))
        for name in changed:
            assert f"{name} {theirs[name]}" in header, f"the header says why {name} differs"
