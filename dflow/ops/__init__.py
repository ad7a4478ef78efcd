"""Ops: the registry and one module per family (math, array, state, nn)."""
