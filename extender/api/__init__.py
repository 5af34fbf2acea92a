"""The HTTP edge: the only package that imports `fastapi`.

- `wire`: the kube-scheduler extender v1 types as pydantic models, with the Go
  field names as keys (PascalCase), pinned by golden fixtures;
- `app`: the FastAPI application (extender verbs, plan, health, metrics);
- `page`: the plan as an HTML grid;
- `loadbench`: a loopback load generator for the verbs.

The app decides nothing: it parses, asks the controller's `Verbs`, and writes
the answer back in the wire format (400 on a malformed body, never a 500).
"""
