"""fixtures/nccl is what fixtures/nccl/generate.py writes (edit the script, not the files)."""

from __future__ import annotations

import importlib.util

from tests.support.env import FIXTURES

NCCL = FIXTURES / "nccl"


def _generator():
    spec = importlib.util.spec_from_file_location("nccl_fixtures", NCCL / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_files_are_what_the_generator_writes():
    files = _generator().files()
    for name, text in files.items():
        assert (NCCL / name).read_text() == text, f"{name}: run python fixtures/nccl/generate.py"
    written = {
        str(p.relative_to(NCCL))
        for p in NCCL.rglob("*")
        if p.is_file() and p.name not in ("generate.py", "README.md")
    }
    assert written == set(files), "files in fixtures/nccl the generator does not write"


def test_every_fixture_is_in_the_readme():
    readme = (NCCL / "README.md").read_text()
    for name in _generator().files():
        top = name.split("/")[0]
        assert f"`{top}" in readme, name
