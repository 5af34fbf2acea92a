"""Replay a scenario into a real cluster, in compressed time, and read back what it did.

The cluster decides: its real kube-scheduler, and whatever scheduling system the
replay's *peer* runs (`peers`: today `gpuroster` and `fifo`, a `gpuroster serve`
process behind the extender). This package only plays the world around it and
reads the result:

- `world`: one fake GPU node per scenario node (KWOK keeps them Ready), the bare
  shape of job pods and service Deployments, the namespace wiped before and
  after, and each job's completion after its true duration, measured from when
  its gang runs (KWOK completes the pods);
- `peers`: the peer interface and registry (which processes run, how a job is
  submitted at its arrival step, how services are driven each step);
- `driving`: the clock (`play`): steps of `step_seconds`, arrivals and ends in
  the last tenth of the step before, a sample late in every step;
- `readback`: samples, and the grid rebuilt at the end from bindings, admission
  annotations and the samples, as the simulator's grid is scored.

With `extender.adapter` it is the only package that imports the Kubernetes
client; from the adapter it uses only `extender.adapter.annotations` (the
annotation and label names gpuroster reads and writes: the adapter's public
contract), and the adapter never imports it (`.importlinter`).
"""

from extender.replay.driving import (
    START_SLACK_SECONDS,
    Replay,
    exit_on_termination,
    local_cluster,
    play,
)
from extender.replay.peers import Context, Peer
from extender.replay.readback import Sample, StepView

__all__ = [
    "START_SLACK_SECONDS",
    "Context",
    "Peer",
    "Replay",
    "Sample",
    "StepView",
    "exit_on_termination",
    "local_cluster",
    "play",
]
