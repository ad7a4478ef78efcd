"""Running graphs on a Dask cluster: placement, stages, variables on their workers.

``tf.Session(target)`` with a Dask scheduler address runs here; see
:mod:`~dflow.distributed.partition` (what runs where, in which order),
:mod:`~dflow.distributed.worker` (what each worker holds and does),
:mod:`~dflow.distributed.runner` (one step, from the client) and
:mod:`~dflow.distributed.collective` (allreduce and broadcast between workers).
"""
