"""Tool output as people save and paste it: what is clearly not the output, told apart. Pure.

Real dumps arrive wrapped: a UTF-8 byte-order mark and CRLF line ends (saved on Windows), the shell
prompt and command before the output (``[root@ufm01 ~]# ibnetdiscover``), a PuTTY session-log banner
(``=~=~=~=~=~=~=~=~=~=~=~= PuTTY log 2023.02.03 09:32:51 =~=~=~=~=~=~=~=~=~=~=~=``), a line the tool
wrote on stderr into the same terminal (``ibwarn: [4321] _do_madrpc: recv failed``), and the prompt
again after it. ibsim reads such a file (it skips what it does not know); ibdiag skips these lines too,
counts them and says where the first one was (:class:`Skipped`), and keeps refusing a line of another
shape *inside* the output: a dump is never judged in part.

:func:`lines` yields ``(line number, text)`` with the BOM and line ends gone and junk lines dropped;
the caller's grammar decides what else is outside (before the first or after the last line it knows).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from ibdiag.text import safe_excerpt

#: Longest line any parser here looks at with a regular expression; longer is refused by the caller.
MAX_LINE = 4096

_PUTTY = re.compile(r"^=~=~=~=~=~=~=~=~=~=~=~= PuTTY log [\d. :]{1,40}=~=~=~=~=~=~=~=~=~=~=~=$")
#: ``[root@ufm01 dgxa100]# cmd``, ``user@host:~$ cmd``, ``host# cmd``, ``$ cmd`` (and a bare prompt).
_PROMPT = re.compile(
    r"^(?:\[[^\]\n]{1,200}\]|[\w.-]{1,64}@[\w.-]{1,128}(?::\S{0,200})?|[\w.-]{1,64}|)[#$%>](?:\s.*)?$"
)
#: What infiniband-diags' libraries print on stderr (libibmad ``ibwarn``/``iberror``, source positions).
_STDERR = re.compile(
    r"^(?:ibwarn|ibpanic|iberror|ibdebug)\b|^[\w.-]{1,40}: (?:iberror|ibwarn|ibpanic)\b"
    r"|^src/[\w./-]{1,80}:\d{1,6}[;:]|^(?:ibnetdisc|query_smp|mad_rpc|_do_madrpc)\S*[:\s]"
)
_BOM = "\ufeff"
#: How the tools' own lines start: never a prompt, banner or stderr line (checked first: fast).
_NEVER = ("#", "vendid=", "devid=", "sysimgguid=", "switchguid=", "caguid=", "routerguid=", "0x")


@dataclass(frozen=True)
class Skipped:
    """Lines that are not the tool's output: how many, and the first one."""

    count: int
    first_line: int
    first_text: str

    def text(self, what: str) -> str:
        return (
            f"{self.count} line(s) that are not {what} skipped (a prompt, a log banner, a stderr "
            f"line); the first at line {self.first_line}: {self.first_text}"
        )


def is_junk(line: str) -> bool:
    """A prompt, a PuTTY banner or a line of the tools' stderr: never part of any tool's output.
    A comment (``# Topology file``) is not a prompt: a prompt has something, or nothing, before
    its ``#``/``$`` and then a space and a command."""
    if line.startswith(_NEVER) or len(line) > MAX_LINE or (line[0] == "[" and line[1:2].isdigit()):
        return False
    return bool(_PUTTY.match(line) or _STDERR.match(line) or _PROMPT.match(line))


def normalise(text: str) -> str:
    """Without a leading byte-order mark (``\\ufeff``: Notepad's UTF-8)."""
    return text[1:] if text.startswith(_BOM) else text


def lines(text: str, junk: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """``(number, stripped line)`` of every non-blank line that is not junk; junk lines are appended
    to ``junk`` (number, text). ``splitlines`` takes CRLF, CR and LF alike."""
    for n, raw in enumerate(normalise(text).splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if is_junk(line):
            junk.append((n, line))
            continue
        yield n, line


def skipped(junk: list[tuple[int, str]]) -> Skipped | None:
    if not junk:
        return None
    first = min(junk)
    return Skipped(len(junk), first[0], safe_excerpt(first[1], 80))
