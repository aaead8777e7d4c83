"""The installed bash completion in a real bash with Debian's bash-completion (issue #27): a script in
/etc/bash_completion.d does nothing without that package; with it, both places it reads work (the
compat directory at start, the completions directory on first use), and completing runs ibdiag."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.env import REPO, unavailable

BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")
SCRIPT = REPO / "completions" / "ibdiag.bash"


@pytest.fixture
def bash_env(ibdiag_exe):
    if not BASH_COMPLETION.exists():
        unavailable("bash-completion is not installed (make system-deps)")
    path = f"{Path(ibdiag_exe).parent}:{os.environ['PATH']}"
    return {k: v for k, v in os.environ.items() if not k.startswith("BASH_COMPLETION")} | {
        "PATH": path
    }


def _bash(script: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [shutil.which("bash") or "/bin/bash", "--norc", "--noprofile", "-c", script],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


COMPLETE = """
source {bc}
{load}
complete -p ibdiag >/dev/null || exit 9
COMP_WORDS=(ibdiag {word}); COMP_CWORD=1; COMP_LINE="ibdiag {word}"; COMP_POINT=${{#COMP_LINE}}
_ibdiag_completion ibdiag
printf '%s\\n' "${{COMPREPLY[@]}}"
"""


def test_the_compat_directory_is_read_by_bash_completion(bash_env, tmp_path):
    compat = tmp_path / "bash_completion.d"  # stands in for /etc/bash_completion.d
    compat.mkdir()
    shutil.copy(SCRIPT, compat / "ibdiag")
    res = _bash(
        COMPLETE.format(bc=BASH_COMPLETION, load="", word="co"),
        {**bash_env, "BASH_COMPLETION_COMPAT_DIR": str(compat)},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["counters"]


def test_the_completions_directory_is_loaded_on_first_use(bash_env, tmp_path):
    user = tmp_path / "user"  # stands in for /usr/share/bash-completion/completions
    (user / "completions").mkdir(parents=True)
    shutil.copy(SCRIPT, user / "completions" / "ibdiag")
    res = _bash(
        COMPLETE.format(bc=BASH_COMPLETION, load="_completion_loader ibdiag", word="b"),
        {**bash_env, "BASH_COMPLETION_USER_DIR": str(user)},
    )
    assert res.returncode == 0, res.stderr
    assert "bench" in res.stdout.split()


def test_without_bash_completion_the_directory_is_never_read(bash_env, tmp_path):
    """Plain bash (the package absent): nothing defines the completion, however it is installed."""
    res = _bash("complete -p ibdiag", bash_env)
    assert res.returncode != 0 and "no completion specification" in res.stderr


ROOT_BASHRC = Path("/usr/share/base-files/dot.bashrc")  # Debian's /root/.bashrc (base-files)
ENABLE = "[ -f /usr/share/bash-completion/bash_completion ] && . /usr/share/bash-completion/bash_completion\n"


def _interactive_root_bash(
    home: Path, env: dict[str, str], script: str
) -> subprocess.CompletedProcess[str]:
    """An interactive bash as root starts: Debian's /etc/bash.bashrc, then ~/.bashrc."""
    return subprocess.run(
        [shutil.which("bash") or "/bin/bash", "-i", "-c", script],
        env={**env, "HOME": str(home), "TERM": "dumb"},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_root_on_stock_debian_12_gets_no_completion_until_it_is_enabled(bash_env, tmp_path):
    """Issue 38: root's ~/.bashrc (base-files) has no completion block and /etc/bash.bashrc's is
    commented out, so the installed script is never loaded for root; docs/completion.md's line in
    ~/.bashrc (or the block uncommented in /etc/bash.bashrc) turns it on."""
    bashrc = Path("/etc/bash.bashrc")
    if not ROOT_BASHRC.exists() or not bashrc.exists():
        unavailable("not a Debian system (base-files' dot.bashrc, /etc/bash.bashrc)")
    if "\n#    . /usr/share/bash-completion/bash_completion" not in bashrc.read_text():
        pytest.skip("this /etc/bash.bashrc already enables completion (not stock Debian 12)")
    user = tmp_path / "user"  # stands in for /usr/share/bash-completion/completions
    (user / "completions").mkdir(parents=True)
    shutil.copy(SCRIPT, user / "completions" / "ibdiag")
    env = {**bash_env, "BASH_COMPLETION_USER_DIR": str(user)}
    home = tmp_path / "root"
    home.mkdir()
    (home / ".bashrc").write_text(ROOT_BASHRC.read_text())
    probe = (
        "type _completion_loader >/dev/null 2>&1 && _completion_loader ibdiag; complete -p ibdiag"
    )
    stock = _interactive_root_bash(home, env, probe)
    assert stock.returncode != 0 and "no completion specification" in stock.stderr
    (home / ".bashrc").write_text(ROOT_BASHRC.read_text() + ENABLE)  # the documented fix
    fixed = _interactive_root_bash(home, env, probe)
    assert fixed.returncode == 0 and "ibdiag" in fixed.stdout, fixed.stderr
    assert ENABLE.strip() in (REPO / "docs" / "completion.md").read_text()
