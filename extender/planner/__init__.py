"""The planner: purely computational, no I/O, no Kubernetes, no HTTP.

Imports the standard library and numpy only. It sees cluster state as
`model.PlanInput` snapshots and answers `model.Plan` decisions; the simulator
runs any policy over a scenario step by step.
"""
