"""``ibdiag fabric``: the InfiniBand subnet itself — subnet manager, links, switch-side counters.

Data flow: :mod:`.collect` runs infiniband-diags (or :mod:`.dump` loads what they printed) into a
:class:`~.capture.Capture`; :mod:`.build` parses it (:mod:`.netdiscover`, :mod:`.linkinfo`,
:mod:`.queryerrors`, :mod:`.sminfo`, :mod:`.toolerr`) into one :class:`~.model.Fabric`; :mod:`.hosts`
names host ports by node, NIC and GPU; :mod:`.checks` judges, with counters' meanings, rules and
accumulator; :mod:`.views` renders. :mod:`.command` is the entry point (``run(FabricRequest) ->
FabricResult``).
"""
