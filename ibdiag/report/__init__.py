"""Many nodes' JSON in one fleet view (``ibdiag report``): status per node, configuration outliers
against the majority, the fleet's counter errors, the sweep's bad nodes and links, a drain list.

:mod:`~ibdiag.report.inputs` reads and checks the files (each one untrusted),
:mod:`~ibdiag.report.view` builds the view with pandas, :mod:`~ibdiag.report.checks` makes
its findings (``report.*``), :mod:`~ibdiag.report.render` and :mod:`~ibdiag.report.html`
show it.
"""
