"""The control plane: a local job registry, a loopback control endpoint per job process, and
the client the CLI uses to reach running jobs (``flowpoint list/savepoint/stop/cancel``)."""
