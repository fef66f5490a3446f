"""A task's partition of state across units of work (epochs, continuous segments): its working
copy (``working.py``, ``backend.py``: memory or a local RocksDB), the durable copy of it that any
host can rebuild from (``durable.py``), the chain of committed state files (``committed_chain.py``)
and the protocol types the driver and the tasks exchange about units of work (``protocol.py``).

Above keyed state (``flowpoint.state``) and snapshot storage (``flowpoint.checkpoint``), which it
uses; below the task code that drives it (docs/architecture.md, "The layers").
"""
