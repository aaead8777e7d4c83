"""Many nodes' JSON in one fleet view (``ibdiag report``): status per node, configuration outliers
against the majority, the fleet's counter errors, the sweep's bad nodes and links, a drain list.

:mod:`~ibdiag.fleetreport.inputs` reads and checks the files (each one untrusted),
:mod:`~ibdiag.fleetreport.view` builds the view with pandas, :mod:`~ibdiag.fleetreport.checks` makes
its findings (``report.*``), :mod:`~ibdiag.fleetreport.render` and :mod:`~ibdiag.fleetreport.html`
show it.
"""
