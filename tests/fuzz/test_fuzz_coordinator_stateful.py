"""Sequences of API requests against a model of what the coordinator must hold: runs open and end, windows
arrive directly or through imports that are committed or aborted, marks open and close, hostile requests
fall in between, and every run is exported along the way.

After each step the model and the coordinator agree on every answer's status and on each run's window
count; a refused request changes nothing; the export of every run answers 200 and lists exactly the
windows the model says are visible."""

from __future__ import annotations

import itertools
import json
import pathlib
import re
import tempfile
from dataclasses import dataclass, field

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, get_state_machine_test, initialize, rule

from fuzz.coord_harness import Answer, CoordinatorApi, check_answer, check_export, segment
from fuzz.coord_strategies import MARK, PHASE_WORD, RUN_CREATE, route_body, valid_batch
from fuzz.hostile import JSON
from fuzz.profiles import fuzz_profile
from sparkwatch.store.refusals import ENDED_RUN_SLACK_NS


@dataclass
class RunModel:
    t_start_ns: int
    t_end_ns: int | None = None
    visible: int = 0
    ids: set[str] = field(default_factory=set)  # every window id in the run, staged ones included
    marks: set[str] = field(default_factory=set)

    @property
    def open(self) -> bool:
        return self.t_end_ns is None

    def takes(self, windows: list[tuple[int, int]]) -> bool:
        """An ended run takes windows only inside its span, give or take ENDED_RUN_SLACK_NS."""
        if self.t_end_ns is None:
            return True
        lo, hi = self.t_start_ns - ENDED_RUN_SLACK_NS, self.t_end_ns + ENDED_RUN_SLACK_NS
        return all(lo <= start and end <= hi for start, end in windows)


@dataclass
class ImportModel:
    run: str
    ids: set[str] = field(default_factory=set)
    spans: list[tuple[int, int]] = field(default_factory=list)  # (t_start_ns, t_end_ns) of its windows
    state: str = "open"  # "open", "committed" or "aborted"


def _json_schema_phase(body: dict[str, JSON]) -> bool:
    """hypothesis-jsonschema reads the schema's pattern with Python's ``$`` (which also matches before a
    final newline); JSON Schema's ``$`` does not, and neither does the API."""
    return re.fullmatch(PHASE_WORD, str(body.get("phase", "timed"))) is not None


class CoordinatorMachine(RuleBasedStateMachine):
    runs = Bundle("runs")
    imports = Bundle("imports")

    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory(prefix="sparkwatch-fuzz-")
        self.api = CoordinatorApi(pathlib.Path(self._dir.name) / "fuzz.db")  # a fresh one per sequence
        self.model: dict[str, RunModel] = {}
        self.import_model: dict[str, ImportModel] = {}
        self.serial = itertools.count()

    def teardown(self) -> None:
        self.api.close()
        self._dir.cleanup()

    # ---- helpers ----
    def post(self, path: str, body: JSON | None = None, method: str = "POST") -> Answer:
        answer = self.api.call(method, path, None if body is None else json.dumps(body).encode())
        check_answer(answer)
        return answer

    def expect(self, answer: Answer, status: int, before: object) -> None:
        assert answer.status == status, f"expected {status}: {answer}"
        if status >= 400:
            assert self.api.state() == before, f"a refused request changed the database: {answer}"

    def check_run(self, run: str) -> None:
        assert self.api.window_count(run) == self.model[run].visible, f"run {run}: window count drifted"

    # ---- rules ----
    @initialize(target=runs)
    def first_run(self) -> str:
        return self.create_run({"name": "fuzz"})

    @rule(target=runs, body=RUN_CREATE)
    def create_run(self, body: dict[str, JSON]) -> str:
        answer = self.post("/v1/runs", body)
        assert answer.status == 201, str(answer)
        run = answer.json()["id"]
        assert isinstance(run, str) and run not in self.model
        self.model[run] = RunModel(answer.json()["t_start_ns"])
        return run

    @rule(run=runs, with_command=st.booleans())
    def end_run(self, run: str, with_command: bool) -> None:
        before = self.api.state()
        body = {"command": {"argv": ["bench", "--fast"], "exit_code": 0}} if with_command else None
        answer = self.post(f"/v1/runs/{segment(run)}/end", body)
        self.expect(answer, 200 if self.model[run].open else 409, before)
        if answer.status == 200:
            model = self.model[run]
            assert answer.json()["dropped_marks"] == sorted(model.marks)  # the end drops them, by name
            model.t_end_ns = answer.json()["t_end_ns"]
            model.marks.clear()

    @rule(target=imports, run=runs)
    def begin_import(self, run: str) -> str:
        answer = self.post(f"/v1/runs/{segment(run)}/imports", {})
        assert answer.status == 201, str(answer)
        import_id = answer.json()["import_id"]
        self.import_model[import_id] = ImportModel(run)
        return str(import_id)

    @rule(run=runs, batch=valid_batch(), into=st.none() | imports, reuse=st.booleans())
    def post_windows(self, run: str, batch: list[dict[str, JSON]], into: str | None, reuse: bool) -> None:
        model = self.model[run]
        for window in batch:  # fresh ids, unless one is meant to collide with a stored one
            window["id"] = f"{next(self.serial)}-{window['id']}"[:200]
        if reuse and model.ids:
            batch[-1]["id"] = sorted(model.ids)[0]
        body: dict[str, JSON] = {"windows": batch}
        if into is not None:
            body["import_id"] = into
        status = self._windows_status(run, batch, into)
        before = self.api.state()
        answer = self.post(f"/v1/runs/{segment(run)}/windows", body)
        self.expect(answer, status, before)
        if status == 201:
            self._apply_windows(run, body)
        self.check_run(run)

    def _apply_windows(self, run: str, body: dict[str, JSON]) -> None:
        ids = {str(w["id"]) for w in body["windows"]}
        self.model[run].ids |= ids
        into = body.get("import_id")
        if into is None:
            self.model[run].visible += len(ids)
        else:
            self.import_model[str(into)].ids |= ids
            self.import_model[str(into)].spans += _spans(body["windows"])

    def _windows_status(self, run: str, batch: list[dict[str, JSON]], into: str | None) -> int:
        if into is not None:
            imported = self.import_model[into]
            if imported.run != run or imported.state == "aborted":
                return 404
            if imported.state == "committed":
                return 409
        if not self.model[run].takes(_spans(batch)):
            return 409
        return 409 if {str(w["id"]) for w in batch} & self.model[run].ids else 201

    @rule(import_id=imports, commit=st.booleans())
    def finish_import(self, import_id: str, commit: bool) -> None:
        imported = self.import_model[import_id]
        run = self.model[imported.run]
        path = f"/v1/runs/{segment(imported.run)}/imports/{segment(import_id)}"
        before = self.api.state()
        answer = self.post(path + "/commit", {}) if commit else self.post(path, method="DELETE")
        status = {"open": 200, "committed": 409, "aborted": 404}[imported.state]
        if status == 200 and commit and not run.takes(imported.spans):
            status = 409  # the run ended after these windows were staged, and they lie outside it
        self.expect(answer, status, before)
        if status == 200 and commit:
            assert answer.json()["committed"] == len(imported.ids), str(answer)
            run.visible += len(imported.ids)
            imported.state = "committed"
        elif status == 200:
            assert answer.json()["dropped"] == len(imported.ids), str(answer)
            run.ids -= imported.ids
            imported.state = "aborted"
        self.check_run(imported.run)

    @rule(run=runs, body=MARK.filter(_json_schema_phase))
    def mark(self, run: str, body: dict[str, JSON]) -> None:
        model, name = self.model[run], str(body["name"])
        if body["event"] == "begin":
            status = 409 if not model.open or name in model.marks else 201
        else:
            status = (
                409
                if not model.open
                else 404
                if name not in model.marks
                else 409
                if name in model.ids
                else 200
            )
        before = self.api.state()
        self.expect(self.post(f"/v1/runs/{segment(run)}/marks", body), status, before)
        if status < 300:
            self._apply_mark(run, body)
        self.check_run(run)

    def _apply_mark(self, run: str, body: dict[str, JSON]) -> None:
        model, name = self.model[run], str(body["name"])
        if body["event"] == "begin":
            model.marks.add(name)
        else:
            model.marks.discard(name)
            model.ids.add(name)
            model.visible += 1

    @rule(run=runs, route=st.sampled_from(["end", "windows", "imports", "marks"]), data=st.data())
    def hostile(self, run: str, route: str, data: st.DataObject) -> None:
        body = data.draw(route_body(route))
        before = self.api.state()
        answer = self.api.call("POST", f"/v1/runs/{segment(run)}/{route}", body)
        check_answer(answer)
        if answer.status >= 400:
            assert self.api.state() == before, f"a refused request changed the database: {answer}"
            return
        # a hostile body the API took was valid after all: it does what the rule above would have done
        if route == "end":
            self.model[run].t_end_ns = answer.json()["t_end_ns"]
        elif route == "imports":  # the body is not read at all
            self.import_model[answer.json()["import_id"]] = ImportModel(run)
        elif route == "windows":
            self._apply_windows(run, json.loads(body or b""))
        else:
            self._apply_mark(run, json.loads(body or b""))
        self.check_run(run)

    @rule(run=runs)
    def export(self, run: str) -> None:
        body = check_export(self.api, run)
        assert len(body["windows"]) == self.model[run].visible, (
            f"run {run}: the export lost or gained windows"
        )


def _spans(windows: JSON) -> list[tuple[int, int]]:
    assert isinstance(windows, list)
    return [(int(w["t_start_ns"]), int(w["t_end_ns"])) for w in windows if isinstance(w, dict)]


#: A plain hypothesis test (not a TestCase), so that --hypothesis-show-statistics reports it too.
test_request_sequences_keep_the_coordinator_consistent = get_state_machine_test(
    CoordinatorMachine, settings=fuzz_profile(ci_examples=25, stateful_step_count=10)
)
