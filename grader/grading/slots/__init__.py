"""Where a notebook's grading job executes: ``claim`` (which sandbox uid a process holds), ``warm_slot`` and
``slot_pool`` (the local pool, forked from warm processes), ``execution_slot`` (one slot's job), ``dask_pool``
(the same jobs on Dask workers)."""
