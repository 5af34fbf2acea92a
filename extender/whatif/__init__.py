"""`gpuroster whatif`: what gpuroster would have done with a cluster's own past.

Reads the history of the GPU pods and services of a window from Prometheus
(kube-state-metrics v2 series, and each service's `gpuroster.io/demand-query`),
writes it as a version-1 scenario, and runs the bench on it beside what really
happened (the grid rebuilt from the pods' real start and end).

- `prom`: the Prometheus HTTP API (query, query_range), every failure one line;
- `reading`: the PromQL it runs and what it reads back (cluster I/O);
- `building`: pure: what was read -> the scenario, the pods' lives, the notes;
- `command`: the command: the bench side by side, pictures, verdict, the files
  written into a temporary directory and renamed into place only when complete.

Cluster I/O lives here and in `prom`; the planner never imports this package and
this package never imports the Kubernetes client (`.importlinter`).
"""
