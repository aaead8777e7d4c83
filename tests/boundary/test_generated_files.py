"""Committed generated files are up to date: fixture trees and shell completions."""

import filecmp
import os

from tests.support.env import REPO, SYSFS_FIXTURES
from tests.sysfsgen import all_profiles, generate


def _tree(root):
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isfile(p):
                with open(p, "rb") as fh:
                    out[rel] = ("file", fh.read())
    return out


def test_fixture_trees_match_their_profiles(tmp_path):
    names = generate(tmp_path)
    assert set(names) == set(all_profiles())
    for name in names:
        assert (SYSFS_FIXTURES / name / "README.md").exists(), f"{name} has no README"
        fresh = {
            **_tree(tmp_path / name / "sys"),
            **{f"../proc/{k}": v for k, v in _tree(tmp_path / name / "proc").items()},
            **{f"../dcb/{k}": v for k, v in _tree(tmp_path / name / "dcb").items()},
        }
        committed = {
            **_tree(SYSFS_FIXTURES / name / "sys"),
            **{f"../proc/{k}": v for k, v in _tree(SYSFS_FIXTURES / name / "proc").items()},
            **{f"../dcb/{k}": v for k, v in _tree(SYSFS_FIXTURES / name / "dcb").items()},
        }
        stale = sorted(set(fresh) ^ set(committed)) + sorted(
            k for k in fresh if k in committed and fresh[k] != committed[k]
        )
        assert not stale, f"fixtures/sysfs/{name} is stale (run `make fixtures`): {stale[:5]}"
        assert filecmp.cmp(
            tmp_path / name / "ibdiag-snapshot.json",
            SYSFS_FIXTURES / name / "ibdiag-snapshot.json",
            shallow=False,
        )


def test_completion_scripts_are_current():
    from ibdiag.cli.completions import SCRIPTS, script

    for shell, name in SCRIPTS.items():
        committed = (REPO / "completions" / name).read_text()
        assert committed == script(shell), f"completions/{name} is stale: run `make completions`"
        assert "_IBDIAG_COMPLETE" in committed
