"""Point-to-point benchmark (``ibdiag bench serve`` / ``ibdiag bench p2p``): RDMA WRITE and TCP.

``command`` and ``serve_command`` (the two commands' entry points), ``protocol`` (control channel,
authentication), ``params`` (what a client asks for), ``tcp`` and ``rdma`` (data paths), ``serve`` (the
server), ``client`` (the client), ``linerate``, ``checks`` (findings) and ``views`` (table/CSV/chart
views of the results).
"""
