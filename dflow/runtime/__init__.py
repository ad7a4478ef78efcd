"""Running graphs: session, plan, executor, per-session state, device namespaces."""
