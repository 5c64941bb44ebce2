"""The report page from an export alone: the summary says the export's numbers to the printed digits, every
window is a band and a table row, the figures read the series block, and an export without one still
renders (its tables) and says why there is nothing to plot."""

from __future__ import annotations

import copy
import json
import math
import pathlib
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from helpers.synthetic_run import synthetic_export
from sparkwatch.commands.summary import summary_table
from sparkwatch.core.export import digest
from sparkwatch.core.windows import Window
from sparkwatch.report import charts, doubt, facts
from sparkwatch.report.bands import band_columns, merged_columns
from sparkwatch.report.bundle import BUNDLE_END, Assets
from sparkwatch.report.page import build_page, summary_html
from sparkwatch_agent.shared.units import lmx_gb, one_decimal, round1


class Cells(HTMLParser):
    """Every <td data-key> of a page: its key, digits, scale and the text shown."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: list[dict[str, Any]] = []
        self._open: dict[str, Any] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "td" and "data-key" in named:
            self._open = {**named, "text": ""}

    def handle_data(self, data: str) -> None:
        if self._open is not None:
            self._open["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._open is not None:
            self.cells.append(self._open)
            self._open = None


@pytest.fixture(scope="module")
def export() -> dict[str, Any]:
    return synthetic_export(hours=0.1, windows=40, series_buckets=600)


def _page_data(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert match is not None
    data: dict[str, Any] = json.loads(match.group(1))
    return data


def test_every_summary_figure_is_the_exports_to_its_printed_digits(export: dict[str, Any]) -> None:
    parser = Cells()
    parser.feed(summary_html(export))
    keys = {c["data-key"] for c in parser.cells}
    # the seed's shape: per node gated W, peak memory and coverage; the totals people quote
    for i in range(len(export["nodes"])):
        assert {f"nodes.{i}.power_w.gated_mean", f"nodes.{i}.memory_used_bytes.peak"} <= keys
        assert f"nodes.{i}.memory_page_cache_bytes.peak" in keys
    assert {"totals.power_w_gated_mean_sum", "totals.joules_per_token", "totals.energy_j"} <= keys
    for cell in parser.cells:
        value = facts.lookup(export, cell["data-key"])
        digits, scale = int(cell["data-digits"]), float(cell["data-scale"])
        shown = cell["text"].split(" ")[0]
        if value is None:
            assert shown == "n/a", cell
        else:
            wanted = one_decimal(value / scale) if digits == 1 else f"{value / scale:.{digits}f}"
            assert shown == wanted, cell
            assert abs(float(shown) - value / scale) <= 0.5 * 10**-digits + 1e-12


def test_one_decimal_figures_round_as_lmx_publishes_them(export: dict[str, Any]) -> None:
    """55.65 W showed as 55.6 on the page and in the table (half to even on the exact decimal) while
    `attach` published 55.7 (lmx's half away from zero): the page is checked against the line published."""
    export = copy.deepcopy(export)
    export["nodes"][0]["power_w"]["gated_mean"] = 55.65
    export["totals"]["memory_used_bytes_peak_of_sum"] = int(136.25 * 2**30)
    assert (round1(55.65), lmx_gb(int(136.25 * 2**30))) == (55.7, 136.3)  # what lmx's fields say
    cells = {c["data-key"]: c["text"].split(" ")[0] for c in _summary_cells(export)}
    assert cells["nodes.0.power_w.gated_mean"] == "55.7"
    assert cells["totals.memory_used_bytes_peak_of_sum"] == "136.3"
    (row,) = [
        line for line in summary_table(export).splitlines() if line.startswith(export["nodes"][0]["node"])
    ]
    assert row.split()[1].rstrip("*") == "55.7", row


def test_a_node_without_a_system_sensor_says_so_and_the_others_name_their_domain(
    export: dict[str, Any],
) -> None:
    rows = facts.node_rows(export)
    system_texts = [row[2].text for row in rows]
    assert system_texts[-1] == "n/a (no sensor)"
    # the domain named, and its coverage where it covered less than the scope (the synthetic run's holes)
    assert all(re.fullmatch(r"\d+\.\d \(\w+(, coverage 0\.\d{3})?\)", t) for t in system_texts[:-1]), (
        system_texts
    )
    assert any("coverage" in t for t in system_texts)
    said = dict(facts.node_facts(export["nodes"][-1]))  # the node's section: the export's code in words
    assert said["n/a system"] == "no sensor: no hwmon power channel or wall meter on this node"


def test_every_window_is_a_band_and_a_table_row(export: dict[str, Any]) -> None:
    page = build_page(export, Assets())
    data = _page_data(page)
    ids = [w["id"] for w in export["windows"]]
    assert data["windows"]["id"] == ids
    bands = data["columns"]["bands"]
    assert set(bands["id"]) == set(ids)
    for w in export["windows"]:  # prefill ends where decode starts, at the first token
        kinds = [k for k, i in zip(bands["k"], bands["id"], strict=True) if i == w["id"]]
        if w["t_first_token_ns"] is not None and w["t_last_token_ns"] is not None:
            assert kinds == [f"{w['phase']} · prefill", f"{w['phase']} · decode"]


def test_the_figures_read_the_series_block_and_its_gaps_stay_gaps(export: dict[str, Any]) -> None:
    figures = charts.figures(export)
    assert figures is not None
    series = export["series"]
    assert len(figures.per_node) == len(series["nodes"])
    for i, node in enumerate(series["nodes"]):
        power = figures.columns[f"n{i}_power"]
        wanted = [ln for ln in node["lines"] if ln["kind"] in ("gpu_power_w", "system_power_w")]
        assert len(power["t"]) == sum(len(ln["t_s"]) for ln in wanted)
        assert power["v"].count(None) == sum(ln["v"].count(None) for ln in wanted)
        assert figures.columns[f"n{i}_gated"]["t"] == [a for a, _ in node["gated_out"]]
    assert any(None in figures.columns[f"n{i}_power"]["v"] for i in range(len(series["nodes"])))
    labels = set(figures.columns["n0_mem"]["l"])
    assert labels == {"memory used", "page cache"}  # the page cache is drawn beside memory used


def test_the_page_cache_column_is_shown_where_some_node_measured_it(export: dict[str, Any]) -> None:
    assert "peak page cache GiB" in facts.node_columns(export)
    unmeasured = {
        **export,
        "nodes": [
            {**n, "memory_page_cache_bytes": dict.fromkeys(("baseline", "peak", "mean"))}
            for n in export["nodes"]
        ],
    }
    older = {
        **export,
        "nodes": [{k: v for k, v in n.items() if k != "memory_page_cache_bytes"} for n in export["nodes"]],
    }
    for made in (unmeasured, older):  # no column of n/a
        assert "peak page cache GiB" not in facts.node_columns(made)
        assert len(facts.node_rows(made)[0]) == len(facts.node_columns(made))


def test_the_memory_baseline_is_drawn_under_the_memory_lines(export: dict[str, Any]) -> None:
    """While memory holds at its baseline, a rule drawn over the line hid it."""
    figures = charts.figures(export)
    assert figures is not None
    memory_panel = figures.per_node[0]["vconcat"][0]["vconcat"][2]
    marks = [layer["mark"]["type"] for layer in memory_panel["layer"]]
    assert marks.index("rule") < marks.index("line"), marks


def test_the_band_legend_names_only_the_kinds_of_band_the_run_has(export: dict[str, Any]) -> None:
    """A legend entry for a kind the run has not (other phases' grey prefill) was read as the gate's grey."""
    figures = charts.figures(export)
    assert figures is not None
    present = set(figures.columns["bands"]["k"])  # 40 windows: drawn one by one, never merged
    assert "other · prefill" not in present and "timed · prefill" in present
    assert "timed · request" not in present  # each of them has token stamps: never one request band
    domains = [
        layer["encoding"]["fill"]["scale"]["domain"]
        for panel in figures.per_node[0]["vconcat"][0]["vconcat"]
        for layer in panel["layer"]
        if "fill" in layer.get("encoding", {})
    ]
    assert domains and all(set(d) == present for d in domains), domains


def test_a_run_without_windows_has_no_band_legend(export: dict[str, Any]) -> None:
    """It listed all ten kinds of band, none of which the run has."""
    figures = charts.figures({**export, "windows": []})
    assert figures is not None and not figures.columns["bands"]["k"]
    fills = [
        layer["encoding"]["fill"]
        for panel in figures.per_node[0]["vconcat"][0]["vconcat"]
        for layer in panel["layer"]
        if "fill" in layer.get("encoding", {})
    ]
    assert fills and all(fill["legend"] is None for fill in fills), fills


def test_a_panel_without_one_value_says_what_was_not_read(export: dict[str, Any]) -> None:
    """A GPU whose power NVML does not support drew an empty frame without ticks (and Vega's "Infinite
    extent" warning), its legend naming a line never drawn; a panel with values has no such text."""
    series = export["series"]
    first = series["nodes"][0]
    unread = [
        {**line, "v": [None] * len(line["v"])} if line["kind"] == "gpu_power_w" else line
        for line in first["lines"]
    ]
    unread = [line for line in unread if line["kind"] != "system_power_w"]
    figures = charts.figures({**export, "series": {**series, "nodes": [{**first, "lines": unread}]}})
    assert figures is not None
    power, util, memory, clock = figures.per_node[0]["vconcat"][0]["vconcat"]

    def texts(panel: dict[str, Any]) -> list[str]:
        return [
            layer["encoding"]["text"]["datum"] for layer in panel["layer"] if layer["mark"]["type"] == "text"
        ]

    assert texts(power) == ["no power read"] and not texts(util) and not texts(memory) and not texts(clock)
    power_line = next(layer for layer in power["layer"] if layer["mark"]["type"] == "line")
    assert power_line["encoding"]["y"]["scale"]["domain"] == [0, 1]  # an extent, where no value gives one
    assert power_line["encoding"]["stroke"]["legend"] is None  # no legend naming a line never drawn
    assert "strokeDash" not in power_line["encoding"]


def test_the_gpu_rail_is_solid_and_each_system_domain_dashed_in_one_legend(export: dict[str, Any]) -> None:
    """A domain that reads the rail again (spbm's ``gpu`` beside NVML's, the same values) drew over it in
    one colour, and the rail seemed missing: domains are dashed, and the legend (one: stroke and dash share
    their field, title and domain) shows which is which."""
    export = copy.deepcopy(export)
    for node in export["series"]["nodes"]:  # spbm's gpu channel beside the rail, reading the same values
        rail = next(x for x in node["lines"] if x["kind"] == "gpu_power_w")
        node["lines"].append({**rail, "kind": "system_power_w", "label": "gpu (hwmon:spbm)"})
    figures = charts.figures(export)
    assert figures is not None
    for i, node in enumerate(export["series"]["nodes"]):
        (line,) = [
            layer
            for layer in figures.per_node[i]["vconcat"][0]["vconcat"][0]["layer"]
            if layer["mark"]["type"] == "line"
        ]
        stroke, dash = line["encoding"]["stroke"], line["encoding"]["strokeDash"]
        kinds = {x["label"]: x["kind"] for x in node["lines"] if x["kind"].endswith("power_w")}
        assert {"gpu_power_w", "system_power_w"} <= set(kinds.values()), kinds
        assert stroke["scale"]["domain"] == dash["scale"]["domain"] == sorted(kinds)
        assert (stroke["field"], stroke["title"]) == (dash["field"], dash["title"]) == ("l", "power")
        drawn = dict(zip(dash["scale"]["domain"], dash["scale"]["range"], strict=True))
        assert {label: kinds[label] for label, d in drawn.items() if d == charts.SOLID} == {
            label: kind for label, kind in kinds.items() if kind == "gpu_power_w"
        }
        assert all(d == charts.DASHED for label, d in drawn.items() if kinds[label] == "system_power_w")


def test_an_export_without_series_renders_its_tables_and_says_why_there_is_no_plot(
    export: dict[str, Any],
) -> None:
    bare = {k: v for k, v in export.items() if k != "series"}
    page = build_page(bare, Assets())
    assert 'id="no-series"' in page and "sparkwatch export --db FILE --series" in page
    assert "sparkwatch runs export ID --series" in page
    from_tsdb = build_page({**bare, "source": {"kind": "prometheus", "metrics": "sparkwatch"}}, Assets())
    assert "sparkwatch export --prometheus URL … --series" in from_tsdb  # a database's commands lack the run
    assert "export --db" not in from_tsdb and "runs export" not in from_tsdb
    assert _page_data(page)["spec"] is None
    assert "vegaEmbed=" not in page  # no 900 kB of plotting code for nothing


def test_the_header_checks_the_digest_the_lmx_notes_quote(export: dict[str, Any]) -> None:
    assert dict(facts.header(export))["export sha256"] == digest(export)
    edited = copy.deepcopy(export)
    edited["nodes"][0]["power_w"]["gated_mean"] = 1.0
    assert "edited since" in dict(facts.header(edited))["export sha256"]


def test_the_command_is_shown_as_a_shell_takes_it_back(export: dict[str, Any]) -> None:
    """`sh -c for i in 1 2; do curl … done` read as other words than the ones run (the CLI quoted them)."""
    quoted = copy.deepcopy(export)
    quoted["run"]["command"] = {
        "argv": ["sh", "-c", "for i in 1 2; do true; done", "\x1b[2J"],
        "exit_code": 0,
    }
    said = dict(facts.header(quoted))["command"]
    assert said == "sh -c 'for i in 1 2; do true; done' '\\x1b[2J' (exit code 0)"


def test_text_from_the_export_cannot_break_out_of_the_page(export: dict[str, Any]) -> None:
    hostile = copy.deepcopy(export)
    hostile["run"]["name"] = "</script><script>alert(1)</script>"
    hostile["windows"][0]["id"] = "<img src=x onerror=alert(1)>"
    hostile["windows"][1]["id"] = "<!--<script>"  # would make the data element run to the end of the page
    page = build_page(hostile, Assets())
    data = _page_data(page)
    assert data["windows"]["id"][:2] == ["<img src=x onerror=alert(1)>", "<!--<script>"]  # kept as data
    assert "<script>alert(1)" not in page and "<img src=x" not in page and "<!--<script>" not in page
    after = page.split('id="report-data">', 1)[1].split("</script>", 1)[1]
    assert "window.sparkwatchReport" in after  # the page's own script is still a script


def test_the_vega_bundle_is_made_once_per_vl_convert_version_and_kept(tmp_path: pathlib.Path) -> None:
    made: list[str] = []

    def make(version: str) -> Any:
        def bundle() -> tuple[str, str]:
            made.append(version)
            return version, f"/* vega {version} */{BUNDLE_END}"

        return bundle

    def assets(version: str, cache: pathlib.Path = tmp_path) -> Assets:
        return Assets(cache_dir=cache, make_bundle=make(version), version=lambda: version)

    first = assets("9.9").vega_bundle()
    assert first.endswith(BUNDLE_END) and made == ["9.9"]
    assert assets("9.9").vega_bundle() == first and made == ["9.9"]  # a second process: from the cache
    (tmp_path / "vega-bundle-9.9.js").write_text("/* cut off */")
    assert assets("9.9").vega_bundle() == first and made == ["9.9", "9.9"]  # a damaged file is made again
    assert "vega 10.0" in assets("10.0").vega_bundle() and made[-1] == "10.0"  # another version, another file
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert assets("9.9", blocked).vega_bundle() == first  # a cache that cannot be written is not used


def test_an_export_of_no_node_renders_without_figures_and_says_why(export: dict[str, Any]) -> None:
    """Schema-valid, and nothing to draw: no Vega view (whose zoom has no panel to name) is embedded."""
    empty = {**export, "nodes": [], "series": {**export["series"], "nodes": []}}
    empty["windows"] = [{**w, "nodes": []} for w in export["windows"]]
    page = build_page(empty, Assets())
    assert "The export measured no node, so there is nothing to plot." in page
    assert _page_data(page)["spec"] is None


#: The summary cells of the power and energy figures (and J/token): those the doubt mark goes on.
_DOUBTED = re.compile(
    r"nodes\.\d+\.(power_w\.gated_mean|system\.domains\.\d+\.power_w\.gated_mean)$|totals\.("
    r"power_w_gated_mean_sum|energy_j|joules_per_token|system_energy_j|system_joules_per_token)$"
)


def _verdicts(export: dict[str, Any], verdict: str, scope: str = "request") -> dict[str, Any]:
    """The export with every measured window's verdict ``verdict`` but its longest's ``ok`` (or the
    reverse for ``ok``), in ``scope``, and its totals known (one node's coverage left them n/a)."""
    windows = [dict(w) for w in export["windows"]]
    measured = [w for w in windows if w["in_scope"]]
    longest = max(measured, key=lambda w: w["t_end_ns"] - w["t_start_ns"])
    for w in measured:
        w["verdict"] = verdict if w is not longest else ("low_confidence" if verdict == "ok" else "ok")
    known = {"power_w_gated_mean_sum": 208.3, "energy_j": 51234.5, "joules_per_token": 2.992}
    known |= {"system_energy_j": 80123.4, "system_joules_per_token": 4.679, "null_reasons": {}}
    return {
        **export,
        "windows": windows,
        "method": {**export["method"], "scope": scope},
        "totals": {**export["totals"], **known},
    }


def _summary_cells(export: dict[str, Any]) -> list[dict[str, Any]]:
    parser = Cells()
    parser.feed(summary_html(export))
    return parser.cells


def test_power_and_energy_figures_resting_mostly_on_windows_not_ok_are_marked_and_said_so(
    export: dict[str, Any],
) -> None:
    """The text table marked a demo's 27 W (against 56 W of truth) while the report showed the same
    figures bare; the report now marks them and says why under its tables, in the table's words."""
    doubtful = _verdicts(export, "low_confidence")
    cells = _summary_cells(doubtful)
    marked = {c["data-key"] for c in cells if c["text"].endswith(" *")}
    known = {
        c["data-key"] for c in cells if _DOUBTED.match(c["data-key"]) and not c["text"].startswith("n/a")
    }
    assert {"nodes.0.power_w.gated_mean", "nodes.0.system.domains.0.power_w.gated_mean"} <= known
    assert {f"totals.{k}" for k in ("energy_j", "joules_per_token", "system_energy_j")} <= known
    assert marked == known  # every power and energy figure, nothing else (memory, coverage, tokens, n/a)
    measured = [w for w in doubtful["windows"] if w["in_scope"]]
    share = sum(w["t_end_ns"] - w["t_start_ns"] for w in measured if w["verdict"] != "ok") / sum(
        w["t_end_ns"] - w["t_start_ns"] for w in measured
    )
    shown = f"{math.ceil(round(share * 1000, 6)) / 10:g}%"  # to a tenth, rounded up (below)
    note = (
        f"* low confidence: {len(measured) - 1} of {len(measured)} measured window(s), {shown} of their"
        " time, are not ok (below), and these figures are mostly theirs: do not quote them as measured"
    )
    page = build_page(doubtful, Assets())
    assert f'<p class="note doubt" id="doubt-note">{note}</p>' in page
    assert page.index('id="doubt-note"') < page.index('class="method"')  # by the tables, not at the foot
    assert note in summary_table(doubtful).splitlines()  # the same words as the text table's


def test_figures_resting_mostly_on_ok_windows_or_on_the_whole_run_are_not_marked(
    export: dict[str, Any],
) -> None:
    for unmarked in (_verdicts(export, "ok"), _verdicts(export, "low_confidence", scope="run")):
        page = build_page(unmarked, Assets())
        assert [c for c in _summary_cells(unmarked) if c["text"].endswith("*")] == []
        assert "doubt" not in page.split('id="summary"', 1)[1].split("</section>", 1)[0]
        assert "low confidence:" not in page and "do not quote them" not in page


def test_a_meter_that_covered_part_of_the_run_says_so_beside_its_watts_and_why_in_the_nodes(
    export: dict[str, Any],
) -> None:
    """A wall meter at 0.713 of the run showed only its watts beside the GPU's coverage (1.0000), and its
    failed polls were nowhere on the page (a sweep)."""
    export = copy.deepcopy(export)
    node = export["nodes"][0]
    headline = facts.headline_entry(node)
    assert headline is not None
    t0 = export["run"]["t_start_ns"]
    headline["samples"]["coverage_ratio"] = 0.713
    headline["errors"] = [
        {"t_ns": t0, "last_t_ns": t0 + 19 * 10**9, "count": 20, "error": "no answer within the timeout"},
        {"t_ns": t0 + 41 * 10**9, "error": "shelly answered HTTP 503"},  # an earlier export's: no count
    ]
    headline["errors_omitted"] = 3
    parser = Cells()
    parser.feed(summary_html(export))
    (system,) = [c for c in parser.cells if c["data-key"].startswith("nodes.0.system.domains.")]
    assert f"({headline['domain']}, coverage 0.713)" in system["text"]
    assert "GPU coverage" in facts.node_columns(export)
    said = dict(facts.node_facts(node))[f"{headline['domain']} ({headline['source']})"]
    start = facts.utc(t0)
    assert said == (
        f"coverage 0.713; no answer within the timeout ×20 ({start} – {facts.utc(t0 + 19 * 10**9)});"
        f" shelly answered HTTP 503 ({facts.utc(t0 + 41 * 10**9)}); 3 more failed polls of other reasons"
    )
    assert "no answer within the timeout ×20" in build_page(export, Assets())  # in the Nodes section


def test_a_failed_request_is_a_failed_band_by_the_rule_the_export_judged_it_with() -> None:
    """The bands called a window failed by its HTTP status alone (>= 400): a request cut short, a harness's
    failure or a 2xx without a completion was drawn as a served one while the export left it unmeasured."""
    t0 = 1_800_000_000 * 10**9
    made = [
        Window("ok", "timed", t0, t0 + 10**9, http_status=200),
        Window("error", "timed", t0, t0 + 10**9, http_status=503),
        Window("redirect", "timed", t0, t0 + 10**9, http_status=307),
        Window("cut", "timed", t0, t0 + 10**9, http_status=200, source={"upstream_broke_off": True}),
        Window("empty", "timed", t0, t0 + 10**9, http_status=200, source={"upstream_no_completion": True}),
        Window("harness", "timed", t0, t0 + 10**9, source={"harness_failed": True}),
    ]
    export = {"windows": [{**w.to_json(), "in_scope": True, "verdict": "ok"} for w in made]}
    bands = band_columns(export, t0)
    assert dict(zip(bands["id"], bands["k"], strict=True)) == {
        "ok": "timed · request",
        **{w.id: "failed" for w in made[1:]},
    }
    merged = merged_columns(export, t0, join_s=0.5)
    assert dict(zip(merged["k"], merged["n"], strict=True)) == {"timed · request": 1, "failed": 5}


def test_what_the_schema_leaves_optional_or_unbounded_still_makes_a_page(export: dict[str, Any]) -> None:
    """An export whose method lacks phases, scope_s and gap_intervals (the schema requires none of them)
    was refused with KeyError 'phases'; a gated mean of 1e308 (the schema sets no bound) ended in an
    OverflowError traceback while rounding it to one decimal."""
    bare = copy.deepcopy(export)
    for key in ("phases", "scope_s", "gap_intervals"):
        del bare["method"][key]
    assert "scope request of the n/a windows (n/a s);" in facts.method_line(bare)
    assert "a gap is longer than n/a intervals" in build_page(bare, Assets())
    huge = copy.deepcopy(export)
    huge["nodes"][0]["power_w"]["gated_mean"] = 1e308
    assert round1(1e308) == 1e308 and round1(float("inf")) == float("inf")
    assert f"{1e308:.1f}" in build_page(huge, Assets())


@pytest.mark.parametrize(
    ("share", "shown"), [(0.504, "50.4%"), (0.5001, "50.1%"), (0.29, "29%"), (1.0, "100%")]
)
def test_the_doubt_notes_share_is_rounded_up_never_down_to_the_threshold(share: float, shown: str) -> None:
    """A share of 0.504 is over the 0.5 that marks the figures, and the note said "50% of their time"."""
    assert doubt._over_half(share) == shown
