"""The RDMA test bed: which of tests/rdmavm/ is collected where.

* ``make test`` (on the host, without ``IBDIAG_RDMAVM=1``): nothing here; no guest is booted.
* ``make test-rdma`` (``IBDIAG_RDMAVM=1``): ``test_guests.py``, which boots the guests and reports
  the results of the guest tests.
* inside a guest (``IBDIAG_RDMAVM_GUEST=1``, set by the guest's stage script): ``guest/`` on the
  single node (rxe over veth0), ``pair/`` on node 1 of a pair (rxe over eth0; ``vm.Node.pair``
  builds the two guests). Node 0 of a pair collects nothing: it runs the test harness agent
  ``pair/agent.py``, which node 1's tests drive over eth0.
"""

import os

IN_GUEST = os.environ.get("IBDIAG_RDMAVM_GUEST") == "1"
BOOT = os.environ.get("IBDIAG_RDMAVM") == "1"
PAIR_NODE = os.environ.get("IBDIAG_RDMAVM_NETDEV") == "eth0"

collect_ignore = ["vm.py"]
if not IN_GUEST or PAIR_NODE:
    collect_ignore.append("guest")
if not IN_GUEST or not PAIR_NODE:
    collect_ignore.append("pair")
if IN_GUEST or not BOOT:
    collect_ignore.append("test_guests.py")
