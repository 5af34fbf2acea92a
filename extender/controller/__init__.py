"""The step loop and the extender verbs' decisions, one module a concern.

- `stepping`: the round. `Controller` snapshots the cache every step (and
  between steps when it changed), plans the horizon, has the current step
  carried out, and publishes the table; it alone calls the policy;
- `planinput` and `demand`: what the planner is told (jobs, services, their
  GPU sets and forecasts), with what that needs remembered between rounds;
- `writing`: the leader's writes (admit, refill, scale, move, wake);
- `explaining`: why each pod waits, and the Events and `Planned` condition
  that say so; never a decision;
- `table` and `verbs`: the value each round publishes, and filter,
  prioritize and bind answered from it (never planning on the request path;
  the binding is their only write);
- `planview`: the plan as JSON for `GET /plan`;
- `clock`: the time source (real, or a fake the tests move);
- `main`: `gpuroster serve` and `gpuroster plan`.

No `kubernetes` or `fastapi` imports here: the adapter and the API own those.
`.importlinter` keeps the parts apart (the verbs import no writer, only the
round imports the policy).
"""
