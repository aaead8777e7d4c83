"""Config files: tables per command, typed keys, unknown keys refused, mapping keys merged."""

from dataclasses import dataclass, field

import pytest

from ibdiag.config import build_dataclass, load_config
from ibdiag.errors import InputError


@dataclass(frozen=True)
class Demo:
    limit: float = 1.0
    count: int | None = None
    names: tuple[str, ...] = ()
    flag: bool = False
    thresholds: dict[str, int] = field(
        default_factory=lambda: {"symbol_error": 10, "link_downed": 10}
    )


def test_defaults_without_a_file(monkeypatch):
    monkeypatch.delenv("IBDIAG_CONFIG", raising=False)
    cfg = load_config(None)
    assert cfg.source is None and cfg.section("topo", Demo) == Demo()


def test_values_are_typed_and_mappings_merge(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(
        "[counters]\nlimit = 2\ncount = 3\nnames = ['a']\nflag = true\n[counters.thresholds]\nlink_downed = 1\n"
    )
    d = load_config(p).section("counters", Demo)
    assert d == Demo(
        limit=2.0,
        count=3,
        names=("a",),
        flag=True,
        thresholds={"symbol_error": 10, "link_downed": 1},
    )


@pytest.mark.parametrize(
    "body, words",
    [
        ("[counters]\nlimit = 'x'\n", "must be a number"),
        ("[counters]\ncount = 1.5\n", "whole number"),
        ("[counters]\nflag = 1\n", "true or false"),
        ("[counters]\nnames = 'a'\n", "must be a list"),
        ("[counters]\nlimt = 1\n", "unknown key limt"),
        ("[counters.thresholds]\nsymbol_eror = 1\n", "unknown key symbol_eror"),
        ("[countres]\n", "unknown table [countres]"),
        ("counters = 1\n", "must be a table"),
    ],
)
def test_bad_values_name_the_file_and_key(tmp_path, body, words):
    p = tmp_path / "c.toml"
    p.write_text(body)
    with pytest.raises(InputError) as e:
        load_config(p).section("counters", Demo)
    assert words in e.value.message and str(p) in e.value.message and e.value.hint


def test_env_variable_and_missing_file(tmp_path, monkeypatch):
    monkeypatch.setenv("IBDIAG_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(InputError, match="no such file"):
        load_config(None)


def test_build_dataclass_direct():
    assert build_dataclass(Demo, {"count": None}, where="[x]").count is None
