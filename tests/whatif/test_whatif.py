"""`gpuroster whatif` against a fake Prometheus HTTP server: the reconstruction and bad input.

The fake answers the exact PromQL `extender.whatif.reading` sends with canned
kube-state-metrics series (names and labels as KSM v2 writes them), or refuses a
query with Prometheus's own 400 body. The real path (a real Prometheus scraping a
KSM stand-in while a replay runs) is e2e/test_whatif.py.
"""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from extender import cli
from extender.planner import metrics
from extender.whatif import reading

T0 = 1_764_800_000.0  # the window's origin: 6 steps of 60 s
S = 60.0
W = reading.Window(T0, S, 6)
UNTIL = W.until


UIDS = reading.alternatives(["u-b0", "u-b1", "u-s", "u-c"])


def q(name: str) -> str:
    return reading.QUERIES[name].format(w=W.range_text(), r=W.resolution_text(), uids=UIDS,
                                        names="chat" if name == "deployment_annotations"
                                        else "chat-abc")


def pod(ns: str, name: str, uid: str, **labels: str) -> dict[str, str]:
    return {"namespace": ns, "pod": name, "uid": uid, **labels}


def vec(*items: tuple[dict[str, str], float]) -> list[dict[str, Any]]:
    return [{"metric": m, "value": [UNTIL, repr(v)]} for m, v in items]


BIG = [pod("ml", "big-0", "u-b0"), pod("ml", "big-1", "u-b1")]
SOLO = pod("ml", "solo", "u-s")
CHAT = pod("web", "chat-abc-1", "u-c")
GANG = {"annotation_gpuroster_io_gang": "big", "annotation_gpuroster_io_gang_size": "2",
        "annotation_gpuroster_io_priority": "4",
        "annotation_gpuroster_io_expected_duration": "3m"}


def canned() -> dict[str, list[dict[str, Any]]]:
    """Three nodes of 4 GPUs. `big`: a gang of two 4-GPU pods (annotations) on nodes a and b,
    created in step 0, both running from step 1 to the end of step 2. `solo`: one GPU,
    PriorityClass `high`, steps 0-1, and `chat`: a Deployment's one-GPU replica running all
    along, both on node c."""
    return {
        q("any_nodes"): vec(({}, 3)),
        q("nodes"): vec(({"node": "gpu-b"}, 4), ({"node": "gpu-a"}, 4), ({"node": "gpu-c"}, 4)),
        q("gpu_pods"): vec((BIG[0], 4), (BIG[1], 4), (SOLO, 1), (CHAT, 1)),
        q("created"): vec((BIG[0], T0 + 5), (BIG[1], T0 + 6), (SOLO, T0 + 10), (CHAT, T0 - 600)),
        q("started"): vec((BIG[0], T0 + 61), (BIG[1], T0 + 65), (SOLO, T0 + 11), (CHAT, T0 - 590)),
        q("completed"): vec((BIG[0], T0 + 181), (BIG[1], T0 + 181), (SOLO, T0 + 125)),
        q("last_seen"): vec((BIG[0], UNTIL), (BIG[1], UNTIL), (SOLO, UNTIL), (CHAT, UNTIL)),
        q("info"): vec(({**BIG[0], "node": "gpu-a", "priority_class": ""}, 1),
                       ({**BIG[1], "node": "gpu-b", "priority_class": ""}, 1),
                       ({**SOLO, "node": "gpu-c", "priority_class": "high"}, 1),
                       ({**CHAT, "node": "gpu-c", "priority_class": ""}, 1)),
        q("owner"): vec(({**CHAT, "owner_kind": "ReplicaSet", "owner_name": "chat-abc",
                          "owner_is_controller": "true"}, 1),
                        ({**SOLO, "owner_kind": "<none>", "owner_name": "<none>"}, 1)),
        q("pod_annotations"): vec(({**BIG[0], **GANG}, 1), ({**BIG[1], **GANG}, 1),
                                  (SOLO, 1), (CHAT, 1)),
        q("pod_labels"): vec((SOLO, 1)),
        q("node_labels"): vec(({"node": "gpu-a", "label_gpuroster_io_topology_order": "0"}, 1),
                              ({"node": "gpu-b", "label_gpuroster_io_topology_order": "1"}, 1),
                              ({"node": "gpu-c", "label_gpuroster_io_topology_order": "2"}, 1)),
        q("replicaset_owner"): vec(({"namespace": "web", "replicaset": "chat-abc",
                                     "owner_kind": "Deployment", "owner_name": "chat"}, 1)),
        q("deployment_annotations"): vec(({"namespace": "web", "deployment": "chat",
                                           "annotation_gpuroster_io_max_swap": "1"}, 1)),
    }


def replicas() -> list[dict[str, Any]]:
    return [{"metric": {"namespace": "web", "deployment": "chat"},
             "values": [[T0 + (k + 1) * S, "1"] for k in range(6)]}]


class FakePrometheus:
    def __init__(self, answers: dict[str, list[dict[str, Any]]],
                 ranges: dict[str, list[dict[str, Any]]], refuse: str | None = None) -> None:
        self.answers, self.ranges, self.refuse = answers, ranges, refuse
        self.seen: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                url = urllib.parse.urlparse(self.path)
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                query = urllib.parse.parse_qs(body)["query"][0]
                owner.seen.append(query)
                if owner.refuse is not None and owner.refuse in query:
                    self.reply(400, {"status": "error", "errorType": "bad_data",
                                     "error": "invalid parameter \"query\": 1:1: parse error"})
                elif url.path == "/api/v1/query":
                    self.reply(200, {"status": "success", "data": {
                        "resultType": "vector", "result": owner.answers.get(query, [])}})
                else:
                    self.reply(200, {"status": "success", "data": {
                        "resultType": "matrix", "result": owner.ranges.get(query, [])}})

            def reply(self, code: int, doc: dict[str, Any]) -> None:
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    chat = reading.REPLICAS.format(ns="web", name="chat")
    f = FakePrometheus(canned(), {chat: replicas()})
    yield f
    f.httpd.shutdown()


def whatif(url: str, out: Path, *extra: str) -> int:
    return cli.main(["whatif", "--prometheus", url, "--since", f"{T0:.3f}", "--until",
                     f"{UNTIL:.3f}", "--step", "60s", "--out", str(out), *extra])


def test_the_history_becomes_a_scenario_and_what_happened_is_scored_beside_the_policies(
        fake: FakePrometheus, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "w"
    assert whatif(fake.url, out) == 0
    printed = capsys.readouterr().out
    assert "actual" in printed and "gpuroster" in printed and "verdict" in printed
    doc = json.loads((out / "whatif.json").read_text())
    import yaml

    sc = yaml.safe_load((out / "scenario.yaml").read_text())
    jobs = {j["name"]: j for j in sc["jobs"]}
    assert sc["cluster"] == {"nodes": 3, "gpus_per_node": 4} and sc["duration_steps"] == 6
    assert sc["step_minutes"] == 1
    # the gang from its annotation, its priority and estimate from theirs
    assert jobs["big"] == {"name": "big", "type": "training", "gpus": 8, "duration_steps": 2,
                           "estimate_steps": 3, "arrival_step": 0, "priority": 4}
    # one pod, its priority from its PriorityClass's name, its estimate observed
    assert jobs["solo"] == {"name": "solo", "type": "training", "gpus": 1, "duration_steps": 2,
                            "estimate_steps": 2, "arrival_step": 0, "priority": 4}
    assert doc["jobs"]["big"] == {"gang": "annotation", "priority": "annotation",
                                  "estimate": "annotation", "pods": 2}
    assert doc["jobs"]["solo"]["priority"] == "PriorityClass high"
    assert doc["jobs"]["solo"]["estimate"] == "observed"
    (chat,) = sc["services"]
    assert chat["demand"] == [1] * 6 and chat["max_swap"] == 1
    assert any("replica history" in n for n in doc["notes"])
    assert any("observed duration" in n for n in doc["notes"])
    # what happened: big on nodes a and b in steps 1-2; solo (lowest free GPU) and chat
    # (highest) on node c
    actual = json.loads((out / "whatif.actual.json").read_text())
    grid = actual["grid"]
    assert [row[1] for row in grid[:8]] == ["big"] * 8
    assert [[row[t] for t in range(6)] for row in grid[:8]] == [
        [None, "big", "big", None, None, None]] * 8
    assert [row[0] for row in grid[8:]] == ["solo", None, None, "chat"]
    assert grid[8] == ["solo", "solo", None, None, None, None]
    assert grid[11] == ["chat"] * 6
    assert actual["rules_broken"] == [] and actual["source"] == "prometheus"
    # scored by the same metrics as every policy
    from extender.planner import scenario as scenario_doc

    s = scenario_doc.parse(sc)
    g, _ = metrics.index_grid(s, grid)
    assert metrics.compute(s, g).result_block() == actual["metrics"]
    for p in ("fifo", "gpuroster"):
        assert json.loads((out / f"whatif.{p}.json").read_text())["policy"] == p
        # the scenario written is one `gpuroster check` (and bench) loads
        assert cli.main(["check", str(out / "scenario.yaml"), str(out / f"whatif.{p}.json")]) == 0
    assert (out / "whatif.grids.png").stat().st_size > 1000
    assert "kube_pod_start_time" in (out / "report.md").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_a_gang_pod_that_never_ran_holds_its_partner_s_gpus_as_held_not_useful(
        tmp_path: Path) -> None:
    answers = canned()
    answers[q("started")] = vec((BIG[0], T0 + 61), (SOLO, T0 + 11), (CHAT, T0 - 590))
    answers[q("completed")] = vec((SOLO, T0 + 125))
    f = FakePrometheus(answers, {reading.REPLICAS.format(ns="web", name="chat"): replicas()})
    try:
        out = tmp_path / "w"
        assert whatif(f.url, out) == 0
    finally:
        f.httpd.shutdown()
    actual = json.loads((out / "whatif.actual.json").read_text())
    doc = json.loads((out / "whatif.json").read_text())
    held = np.asarray(actual["held"], dtype=object)
    assert list(held[:4, 1]) == ["big"] * 4 and "big" not in np.asarray(actual["grid"])
    assert any("big: never ran" in n for n in doc["notes"])


@pytest.mark.parametrize(("change", "said"), [
    ("unreachable", "is unreachable"),
    ("no_ksm", "no kube_node_status_capacity series"),
    ("no_nodes", "kube_node_status_capacity"),
    ("no_gpu_pods", "no pod requested nvidia.com/gpu"),
    ("refused", "Prometheus refused"),
    ("refused_late", "Prometheus refused"),
    ("bad_since", "unreadable time '7x'"),
    ("short_window", "shorter than one step"),
], ids=lambda x: x if isinstance(x, str) and " " not in x else None)
def test_bad_input_is_one_line_non_zero_and_leaves_no_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, said: str) -> None:
    answers = canned()
    refuse = None
    if change == "no_ksm":
        answers[q("any_nodes")] = []
    elif change == "no_nodes":
        answers[q("nodes")] = []
    elif change == "no_gpu_pods":
        answers[q("gpu_pods")] = []
    elif change == "refused":
        refuse = "kube_pod_created"
    elif change == "refused_late":
        refuse = "kube_deployment_spec_replicas"  # after every pod series was read
    f = FakePrometheus(answers, {}, refuse)
    url = f.url
    if change == "unreachable":
        f.httpd.shutdown()
        f.httpd.server_close()
    out = tmp_path / "w"
    args = ["whatif", "--prometheus", url, "--since", f"{T0:.3f}", "--until", f"{UNTIL:.3f}",
            "--step", "60s", "--out", str(out)]
    if change == "bad_since":
        args[4] = "7x"
    if change == "short_window":
        args[4] = "30s"
    try:
        assert cli.main(args) == 2
    finally:
        if change != "unreachable":
            f.httpd.shutdown()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("gpuroster whatif: ") and said in err, err
    assert list(tmp_path.iterdir()) == []  # no output, no temporary directory


def test_an_output_directory_with_files_in_it_is_refused(fake: FakePrometheus, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]
                                                         ) -> None:
    out = tmp_path / "w"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    assert whatif(fake.url, out) == 2
    assert "not empty" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and not fake.seen


def test_a_demand_query_gives_the_demand_and_the_reservation_above_it_is_costed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answers = canned()
    answers[q("deployment_annotations")] = vec((
        {"namespace": "web", "deployment": "chat", "annotation_gpuroster_io_max_swap": "1",
         "annotation_gpuroster_io_demand_query": "max(chat_gpus_needed)"}, 1))
    demand = [{"metric": {}, "values": [[T0 + (k + 1) * S, v]
                                        for k, v in enumerate(["0.4", "1", "0", "0", "0", "0"])]}]
    f = FakePrometheus(answers, {reading.REPLICAS.format(ns="web", name="chat"): replicas(),
                                 "max(chat_gpus_needed)": demand})
    try:
        out = tmp_path / "w"
        assert whatif(f.url, out) == 0
    finally:
        f.httpd.shutdown()
    import yaml

    sc = yaml.safe_load((out / "scenario.yaml").read_text())
    assert sc["services"][0]["demand"] == [1, 1, 0, 0, 0, 0]  # rounded up to whole replicas
    doc = json.loads((out / "whatif.json").read_text())
    # the replica ran all six steps, needed for two: four GPU-steps (minutes) held idle
    assert doc["verdict"]["actual"]["reserved_idle_gpu_hours"] == pytest.approx(4 / 60)
    assert "reserved for services" in capsys.readouterr().out


def test_the_docs_give_the_exact_flags_and_every_query_whatif_runs() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "try-it-first.md").read_text()
    week = reading.Window(0, 3600, 168)
    for flag in reading.KSM_ARGS:
        assert flag in doc
    for query in reading.QUERIES.values():
        assert query.format(w=week.range_text(), r=week.resolution_text(), uids="UID|UID|...",
                            names="NAME|NAME|...") in doc
    assert reading.REPLICAS.format(ns="NAMESPACE", name="DEPLOYMENT") in doc


def test_names_in_a_regex_match_themselves_only() -> None:
    import re

    names = ["chat-7d9f.v2", "a|b", "x(1)", "plain"]
    rx = re.compile(f"^(?:{reading.alternatives(names)})$")
    assert all(rx.match(n) for n in names)
    assert not any(rx.match(n) for n in ["chat-7d9fxv2", "a", "b", "x1", "plai", "plainx"])
