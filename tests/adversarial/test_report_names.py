"""File names are untrusted too (issue 28, case 7): ``report`` printed them raw — a name holding a
title-setting, screen-clearing or clipboard (OSC 52) escape sequence reached the terminal, and
``-o junit`` became invalid XML. Names now pass through the one excerpt rule where they enter."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.support.cli import run_cli
from tests.support.env import SYSFS_FIXTURES

EVIL = [
    "\x1b]0;owned\x07",  # set the window title
    "\x1b[2J\x1b[H",  # clear the screen
    "\x1b]52;c;ZWNobyBwd25lZA==\x07",  # write the clipboard
    "\x0c\x08",  # form feed, backspace: invalid in XML 1.0
]


def _inputs(tmp_path):
    good = run_cli("topo", "--root", str(SYSFS_FIXTURES / "dgx-h100"), "-o", "json")
    assert good.exit_code in (0, 1), good.stderr
    d = tmp_path / "fleet"
    d.mkdir()
    for i, evil in enumerate(EVIL):
        (d / f"node{i}{evil}.json").write_text(good.stdout)
        (d / f"broken{i}{evil}.json").write_text("{not json")
    return d


@pytest.mark.parametrize("fmt", ["table", "junit", "json", "csv"])
def test_hostile_file_names_reach_no_terminal_or_xml_raw(tmp_path, fmt):
    d = _inputs(tmp_path)
    res = run_cli("report", str(d), "-o", fmt, columns=200)
    assert res.exception is None, res.exception
    assert res.exit_code in (0, 1), res.stderr
    for stream in (res.stdout, res.stderr):
        assert "\x1b" not in stream and "\x07" not in stream and "\x0c" not in stream
        assert "\x08" not in stream
    if fmt != "csv":  # (csv has no file names)
        assert "\\x1b]0;owned" in res.stdout + res.stderr  # named, escaped
    if fmt == "junit":
        ET.fromstring(res.stdout)  # well-formed XML
