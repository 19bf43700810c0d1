"""A Go module's files without Go: the proxy's zip, checked against the pinned go.sum hash.

No network here: the zip is made in the test and handed over in place of the download.
The expected hash of that zip was computed with Go's own golang.org/x/mod/sumdb/dirhash
(HashZip, Hash1), so `h1` is checked against Go, not against itself.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path

import pytest

from gridloop.bundle import modules
from gridloop.errors import BuildError, Unfetchable
from gridloop.versions import Component

FILES = {
    "example.com/m@v1.0.0/go.mod": "module example.com/m\n",
    "example.com/m@v1.0.0/config/a.yaml": "kind: A\n",
    "example.com/m@v1.0.0/LICENSE": "MIT\n",
}
GO_SAYS = "h1:58PGh5T/NJ6NsvzhajvwiPq5/IDEH8ORI6YdEReW+zA="  # dirhash.HashZip of FILES


def _zip(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
    return buffer.getvalue()


def _module(sum_: str = GO_SAYS) -> Component:
    return Component(name="m", version="v1.0.0", module="example.com/m", sum=sum_)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GRIDLOOP_CACHE", str(tmp_path))
    return tmp_path


def test_the_hash_is_gos_go_sum_hash() -> None:
    assert modules.h1(_zip(FILES)) == GO_SAYS
    assert modules.h1(_zip({**FILES, "example.com/m@v1.0.0/LICENSE": "GPL\n"})) != GO_SAYS


def test_module_paths_are_escaped_as_go_escapes_them() -> None:
    assert modules.escape("github.com/BurntSushi/toml") == "github.com/!burnt!sushi/toml"
    url = modules.zip_url("https://proxy.golang.org", "sigs.k8s.io/kueue", "v0.17.1")
    assert url == "https://proxy.golang.org/sigs.k8s.io/kueue/@v/v0.17.1.zip"


@pytest.mark.parametrize(
    ("goproxy", "urls"),
    [
        (None, ["https://proxy.golang.org"]),
        ("", ["https://proxy.golang.org"]),
        ("https://a.example/,direct", ["https://a.example"]),
        ("https://a.example|https://b.example,off", ["https://a.example", "https://b.example"]),
        ("direct", []),
    ],
)
def test_goproxy_lists_the_proxies_in_order_without_direct_or_off(
    goproxy: str | None, urls: list[str]
) -> None:
    assert modules.proxies(goproxy) == urls


def test_a_module_with_the_pinned_hash_is_unpacked_once(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    downloads = []
    monkeypatch.setattr(modules, "_download", lambda comp: downloads.append(comp) or _zip(FILES))

    where = modules.module_dir(_module())
    again = modules.module_dir(_module())

    assert where == again == cache / "modules" / "example.com/m@v1.0.0"
    assert (where / "config" / "a.yaml").read_text() == "kind: A\n"
    assert len(downloads) == 1


def test_a_zip_that_is_not_the_pinned_one_is_refused_and_not_unpacked(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tampered = _zip({**FILES, "example.com/m@v1.0.0/config/a.yaml": "kind: Evil\n"})
    monkeypatch.setattr(modules, "_download", lambda comp: tampered)

    with pytest.raises(BuildError, match=r"hashes to h1:.*versions\.yaml pins h1:58PGh5T") as err:
        modules.module_dir(_module())

    assert not isinstance(err.value, Unfetchable)  # never left out: it stops the bundle
    assert not (cache / "modules" / "example.com/m@v1.0.0").exists()


def test_a_module_without_a_pinned_hash_is_not_fetched(cache: Path) -> None:
    missing = re.escape("versions.yaml pins no `sum:` for example.com/m")
    with pytest.raises(BuildError, match=missing):
        modules.module_dir(_module(sum_=""))


def test_a_file_outside_the_modules_folder_is_refused(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    evil = {**FILES, "example.com/m@v1.0.0/../../escape": "x"}
    monkeypatch.setattr(modules, "_download", lambda comp: _zip(evil))

    with pytest.raises(BuildError, match="bad file name"):
        modules.module_dir(_module(sum_=modules.h1(_zip(evil))))

    assert not (cache / "escape").exists()


def test_no_reachable_proxy_is_unfetchable_with_what_was_tried(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOPROXY", "http://127.0.0.1:9/nothing")

    with pytest.raises(Unfetchable) as err:
        modules.module_dir(_module())

    assert "http://127.0.0.1:9/nothing/example.com/m/@v/v1.0.0.zip" in err.value.reason
    assert "pass --mirror DIR" in str(err.value)


def test_every_module_the_bundle_reads_pins_its_hash() -> None:
    from gridloop import versions
    from gridloop.bundle.sources import SOURCES, Kind

    for source in SOURCES:
        if source.kind in (Kind.GO_MODULE, Kind.GO_MODULE_FILES):
            assert versions.get(source.component).sum.startswith("h1:"), source.component
