"""The step loop and the extender verbs' decisions.

- `clock`: the time source (real, or a fake the tests move);
- `stepping`: `Controller` re-plans from a cache snapshot every step, commits
  only the current step (gang admission, service GPU sets, replica counts),
  explains every wait, and publishes the `Table` that filter, prioritize and
  bind read (never planning on the request path);
- `main`: `gpuroster serve` and `gpuroster plan`.

No `kubernetes` or `fastapi` imports here: the adapter and the API own those.
"""
