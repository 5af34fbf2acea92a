"""gpuroster: plans which GPU runs which job at which hour, and makes Kubernetes follow the plan.

Layers (enforced by import-linter, see .importlinter):
- `extender.planner`    pure: grid, policies, simulator, forecasting (stdlib + numpy)
- `extender.optimizing` exact models (OR-Tools / HiGHS) on planner types
- `extender.adapter`    the only package that imports `kubernetes`
- `extender.api`        the only package that imports `fastapi`
- `extender.controller` the step loop: snapshot -> plan -> commit, through the adapter
"""

__version__ = "0.1.0"
