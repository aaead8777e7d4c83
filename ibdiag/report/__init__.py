"""Many nodes' JSON in one fleet view (``ibdiag report``): status per node, configuration outliers
against the majority, the fleet's counter errors, the sweep's bad nodes and links, a drain list.

:func:`ibdiag.report.command.run` is the entry point (a :class:`~ibdiag.report.command.ReportRequest`
in, the report and the view out): :mod:`~ibdiag.report.inputs` reads and checks the files (each one
untrusted), :mod:`~ibdiag.report.view` builds the view with pandas, :mod:`~ibdiag.report.checks` makes
its findings (``report.*``), :mod:`~ibdiag.report.views` and the page :mod:`~ibdiag.report.html`
show it. :mod:`~ibdiag.report.outliers` compares the nodes' configurations and groups the outliers;
with ``--fabric``, :mod:`~ibdiag.report.fabricpath` places the sweeps on the saved fabric,
:mod:`~ibdiag.report.fabrichealth` judges it (fabric's entry point), and
:mod:`~ibdiag.report.fabricpicture` / :mod:`~ibdiag.report.fabricsvg` draw it on the page
(:mod:`~ibdiag.report.fabricpage`).
"""
