"""Full mode: exact models over planner types (OR-Tools CP-SAT, HiGHS).

Kept apart from `extender.planner`, which imports the standard library and
numpy only; this package may import `ortools` and `highspy`.

- `exact`: the `gpuroster-full` policy, a CP-SAT model of the horizon,
  warm-started from the fast plan, committing the current step.
- `bound`: upper bounds on a scenario's value and utilization with perfect
  information (time-indexed MILP / LP relaxing contiguity), to show the
  distance to the optimum.
"""
