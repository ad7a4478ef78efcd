"""Start or join a dflow cluster: Dask workers that carry a TF role (``ps/0``, ``worker/1``).

Every launcher returns a :class:`Cluster`, whose ``target`` goes to ``tf.Session``:

>>> with tf.cluster.local(ps=1, workers=2) as cluster:  # doctest: +SKIP
...     with tf.Session(cluster.target) as sess:
...         sess.run(train_op)

- :func:`local`: worker processes on this machine (the embedded default);
- :func:`cuda`: one worker per GPU of this machine (dask-cuda), PS workers on the CPU;
- :func:`slurm`: one Slurm job per role (dask-jobqueue);
- :func:`connect`: a running Dask scheduler whose workers were started by hand with
  ``dflow worker --scheduler ADDRESS --job ps --task 0``, as ``tf.train.Server`` would be.

A worker's role is its Dask name and a resource (``{"ps": 1}``, ``{"worker": 1, "GPU": 1}``);
:class:`ClusterSpec` reads the roles back. ``distributed`` is imported only when a cluster
is started, so ``import dflow`` stays light.

Security: a Dask worker runs whatever code a peer that reaches it sends (that is how Dask
works), so an embedded cluster listens on loopback only (``host=`` opens it), its dashboard
too, and every launcher takes ``secure=True`` (a throw-away certificate made in memory,
``distributed.security.Security.temporary()``) or ``security=`` (:func:`tls_security` over
your own files): then every connection is TLS and a peer without the certificate is refused.
``tf.train.Server`` takes ``security=`` too, or reads Dask's TLS configuration
(``distributed.comm.tls``), so that TF scripts run over TLS unchanged.
"""

from .launch import LOOPBACK, Cluster, blas_env, connect, cuda, local, tls_env, tls_security, worker_command
from .server import Server
from .slurm import slurm
from .spec import ClusterSpec, role_name, role_resources, task_of, worker_infos

__all__ = ["Cluster", "ClusterSpec", "Server", "local", "cuda", "slurm", "connect", "worker_command",
           "role_name", "role_resources", "task_of", "worker_infos", "blas_env", "tls_security", "tls_env",
           "LOOPBACK"]
