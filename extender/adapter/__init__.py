"""The Kubernetes edge: the only package that imports `kubernetes`.

- `kube`: the client (list, watch, bind, patch, events, scale) behind the
  `Kube` protocol, with `ApiError` for every failure;
- `watching`: informer-style list + watch caches (resync, reconnect, 410 relist);
- `annotations`: pod / Deployment annotations -> typed specs or a named problem;
- `snapshot`: cache contents -> planner input (`model.PlanInput`) and back-maps;
- `objects`: the patches, conditions and Events the controller writes.

Only `kube` touches the client library; the rest works on plain dicts (the
objects' JSON), which keeps the cache cheap and the tests client-free.
"""
