"""dflow's versions, apart from the package so that any module can read them while ``import dflow`` runs."""

# the TF API level dflow implements: what the version checks in TF 1.x scripts compare against
# (``tf.__version__.split('.')``, ``< '1.5'``); dflow's own release is DFLOW_VERSION
__version__ = "1.15.0"
DFLOW_VERSION = "0.1.0"  # dflow's own release: setup.cfg's version, `dflow --version`
