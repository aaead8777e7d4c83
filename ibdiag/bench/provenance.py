"""Where a benchmark run's numbers come from: measured by ibdiag, or read from a tool's log, and what that log says.

:class:`Provenance` is the place for everything a result is only comparable with: today the file a run
was imported from (:class:`ImportInfo`) and the NCCL versions and warnings in its log. Issue 10 adds
here what real logs say about the path the data took (NET/IB or NET/Socket, GPUDirect RDMA, the
command line); the tool-specific header fields stay with the run's kind (``NcclTestsLog``,
``PerftestLog``). The JSON is flat; a field the source does not have is left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ibdiag.bench.jsonfields import Fields, put

#: Most warning lines kept from a log (the count says how many there were).
MAX_WARNINGS = 5


@dataclass(frozen=True)
class RunPosition:
    """Which of several runs in one file this is (they are never averaged)."""

    index: int
    """1-based."""
    count: int
    separation: str
    """How the runs were told apart: ``one after the other``, ``one run per output tag``, or
    ``interleaved (untagged lines; rows attributed in order of appearance)``."""

    @property
    def interleaved(self) -> bool:
        return self.separation.startswith("interleaved")


@dataclass(frozen=True)
class ImportInfo:
    """The log a run was read from: the tool that wrote it, the file, and where in it the run is."""

    tool: str
    """``nccl-tests`` or ``perftest``."""
    source: str
    """The file as given (``<stdin>`` for ``-``)."""
    format: str | None = None
    """The log's format: nccl-tests' era (``2022-2025``), ``json v2``, perftest's ``out_json``."""
    first_line: int | None = None
    """The line the run starts at (text logs)."""
    tag: str | None = None
    """The launcher's output tag of the run's lines (``1,0`` from ``mpirun --tag-output``)."""
    position: RunPosition | None = None
    """Set when the file holds several runs."""

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"tool": self.tool, "source": self.source, "format": self.format, "first_line": self.first_line}
        put(doc, "tag", self.tag)
        if self.position is not None:
            doc.update(run_index=self.position.index, run_count=self.position.count, separation=self.position.separation)
        return doc

    @classmethod
    def read(cls, f: Fields) -> ImportInfo:
        index = f.integer("run_index", 1, 1 << 20)
        position = None
        if index is not None:
            count = f.integer("run_count", index, 1 << 20) or index
            position = RunPosition(index, count, f.text("separation") or "separate")
        return cls(
            tool=f.text("tool", required=True),  # type: ignore[arg-type]
            source=f.text("source") or "?",
            format=f.text("format"),
            first_line=f.integer("first_line", 1),
            tag=f.text("tag"),
            position=position,
        )


@dataclass(frozen=True)
class Provenance:
    """What produced the numbers, as far as the run or its log says."""

    imported: ImportInfo | None = None
    """None: measured by ibdiag itself (its settings are in the run's ``measured`` part)."""
    nccl_version: str | None = None
    """The NCCL library version the log names (``NCCL version 2.18.5+cuda12.2``, ``-J``'s ``nccl_version``)."""
    nccl_tests_version: str | None = None
    nccl_errors: tuple[str, ...] = ()
    """nccl-tests' ``# error:`` lines (``-J``'s ``errors``)."""
    nccl_warnings: tuple[str, ...] = ()
    """The first NCCL WARN/ERROR lines of the log (``line 5: ...``), at most MAX_WARNINGS."""
    nccl_warning_count: int | None = None
    """How many NCCL WARN/ERROR lines the log has."""

    def to_json(self) -> dict[str, Any]:
        doc = {} if self.imported is None else self.imported.to_json()
        put(doc, "nccl_tests_version", self.nccl_tests_version)
        put(doc, "nccl_version", self.nccl_version)
        put(doc, "nccl_errors", self.nccl_errors)
        if self.nccl_warnings or self.nccl_warning_count:
            doc["nccl_warning_count"] = self.nccl_warning_count or len(self.nccl_warnings)
            doc["nccl_warnings"] = list(self.nccl_warnings)
        return doc

    @classmethod
    def read(cls, f: Fields) -> Provenance:
        return cls(
            imported=ImportInfo.read(f) if f.has("tool") else None,
            nccl_version=f.text("nccl_version"),
            nccl_tests_version=f.text("nccl_tests_version"),
            nccl_errors=f.texts("nccl_errors", 1 << 16),
            nccl_warnings=f.texts("nccl_warnings", 1 << 16),
            nccl_warning_count=f.integer("nccl_warning_count", 0),
        )
