"""Issue 14, reader half: every reader refuses bad bytes, huge integers, ragged rows, deep JSON and
impossible numbers with the toolkit's own one-line error naming file, row and column."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from bayes_sched.contention.jobs import read_jobs_csv, read_step_times_csv
from bayes_sched.errors import InputError as SchedInputError
from bayes_sched.interference.tables import (
    InterferenceInputError,
    check_pairs_known,
    read_pairs_csv,
    read_solo_features_csv,
)
from bayes_sched.sim.workload import read_workload
from bayes_sched.topology import TopologyError, read_topology
from collectors import perf_stat
from collectors.procfs import ProcfsParseError, parse_meminfo, parse_stat_cpu
from perfmodel.datasets import pollux_model_dir
from perfmodel.efficiency import EfficiencyModel, NoiseScaleCurve, efficiency_from_noise
from perfmodel.errors import InputError
from perfmodel.profiles import (
    read_gradient_traces,
    read_placements_csv,
    read_profile_csv,
    read_scalability_csv,
    read_step_time_profile,
    read_validation_csv,
)

ROOT = Path(__file__).resolve().parents[1]

PLACEMENTS = "placement,local_bsz,step_time,sync_time\n1,32,0.04,0.0005\n2,32,0.05,0.01\n"
SCALABILITY = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n1,2,32,0.05,0.01\n"
PROFILE = ("num_nodes,num_replicas,local_bsz,accum_steps,step_time,sync_time\n"
           "1,2,32,0,0.05,0.01\n")
VALIDATION = ("progress,iteration,metric,grad_sqr,grad_var\n"
              "100,10,0.5,2.0,1.0\n200,20,0.6,1.5,1.2\n300,30,0.7,1.0,1.5\n")
WORKLOAD = "name,time,application,num_replicas,batch_size\na,0,cifar10,1,128\n"
PAIRS = "job_a,job_b,speed_a,speed_b\na,b,0.8,0.9\n"
TOPOLOGY = '{"gpus_per_switch": [2, 2], "switch_numa": [0, 1]}'

#: (file name, valid text, reader): one per user-file reader.
READERS: list[tuple[str, str, Callable[[Path], object]]] = [
    ("placements.csv", PLACEMENTS, read_placements_csv),
    ("scalability.csv", SCALABILITY, read_scalability_csv),
    ("job.csv", PROFILE, read_profile_csv),
    ("validation-128.csv", VALIDATION, read_validation_csv),
    ("w.csv", WORKLOAD, read_workload),
    ("pairs.csv", PAIRS, read_pairs_csv),
    ("topo.json", TOPOLOGY, read_topology),
]
IDS = [name for name, _, _ in READERS]


def _one_line_naming(error: BaseException, path: Path) -> str:
    message = str(error)
    assert str(path) in message and "\n" not in message
    return message


# --- item 5: encodings -----------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "text", "reader"), READERS, ids=IDS)
def test_utf8_bom_is_accepted(tmp_path: Path, name: str, text: str, reader) -> None:
    plain, bom = tmp_path / "plain", tmp_path / "bom"
    plain.mkdir(), bom.mkdir()
    (plain / name).write_text(text, encoding="utf-8")
    (bom / name).write_bytes(b"\xef\xbb\xbf" + text.encode())
    first, second = reader(plain / name), reader(bom / name)
    if hasattr(first, "step_time"):  # profiles: compare the numbers read, not the source path
        assert np.array_equal(first.step_time, second.step_time)
    elif hasattr(first, "jobs"):
        assert first.jobs == second.jobs
    elif hasattr(first, "equals"):
        assert first.equals(second)
    elif hasattr(first, "grad_var"):
        assert np.array_equal(first.grad_var, second.grad_var)
    else:
        assert first == second


@pytest.mark.parametrize(("name", "text", "reader"), READERS, ids=IDS)
@pytest.mark.parametrize("encoding", ["utf-16", "latin-1", "binary"])
def test_other_encodings_are_one_line_errors(tmp_path: Path, name: str, text: str, reader,
                                             encoding: str) -> None:
    path = tmp_path / name
    if encoding == "binary":
        path.write_bytes(text.encode()[:20] + b"\x00\x01\x02\xff" + text.encode()[20:])
    elif encoding == "latin-1":
        path.write_bytes(text.replace("a", "\xe9", 1).encode("latin-1") if "a" in text
                         else text.encode() + "\xe9\n".encode("latin-1"))
    else:
        path.write_text(text, encoding="utf-16")
    with pytest.raises(InputError) as info:
        reader(path)
    message = _one_line_naming(info.value, path)
    assert "UTF" in message or "binary" in message


def test_a_utf16_profile_fails_the_cli_with_one_line_and_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "placements.csv"
    path.write_text(PLACEMENTS, encoding="utf-16")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "bayes_sched", "fit", "throughput", str(path),
                           "--method", "point"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1
    assert str(path) in done.stderr and "UTF-16" in done.stderr


# --- item 6: integers of 2^63 and more -------------------------------------------------------------

@pytest.mark.parametrize(("text", "row", "column"), [
    (PLACEMENTS.replace("2,32,", f"2,{2**63},"), 3, "local_bsz"),
    (SCALABILITY.replace("1,2,32", f"{2**63},2,32"), 2, "num_nodes"),
    (SCALABILITY.replace("1,2,32", f"1,{2**64 + 1},32"), 2, "num_replicas"),
    (PROFILE.replace("32,0,", f"32,{2**63},"), 2, "accum_steps"),
    (PROFILE.replace("1,2,32", f"1,2,{10**400}"), 2, "local_bsz"),
    (PROFILE.replace("1,2,32", "1,2,1e300"), 2, "local_bsz"),
])
def test_huge_integers_name_row_and_column(tmp_path: Path, text: str, row: int,
                                           column: str) -> None:
    path = tmp_path / "profile.csv"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        read_step_time_profile(path)
    message = _one_line_naming(info.value, path)
    assert f"row {row}, column '{column}'" in message and "expected" in message


def test_huge_workload_counts_name_row_and_column(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text(WORKLOAD.replace(",1,128", f",{2**63},128"))
    with pytest.raises(SchedInputError, match=r"row 2, column 'num_replicas'"):
        read_workload(path)


# --- item 9: topology JSON -------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "words"), [
    ("[" * 100_000 + "]" * 100_000, "nested deeper"),
    ('{"nic_capacity": 1' + "0" * 400 + "}", "digits"),
    ('{"gpus_per_switch": "2222"}', "field 'gpus_per_switch'"),
    ('{"gpus_per_switch": [1.5, 2.5, 2, 2], "switch_numa": [0, 0, 1, 1]}',
     "field 'gpus_per_switch': entry 1"),
    ('{"gpus_per_switch": [true, 2], "switch_numa": [0, 1]}', "field 'gpus_per_switch'"),
    ('{"dram_capacity": true}', "field 'dram_capacity'"),
    ('{"nic_capacity": "12.5e9"}', "field 'nic_capacity'"),
    ('{"nic_capacity": NaN}', "NaN"),
    ('{"switch_numa": [0, 0, 1, -1]}', "field 'switch_numa'"),
    ('{"nic_capacity": 1e9, "nic_capacity": 2e9}', "twice"),
])
def test_topology_refuses_deep_huge_and_mistyped_values(tmp_path: Path, text: str,
                                                        words: str) -> None:
    path = tmp_path / "topo.json"
    path.write_text(text)
    with pytest.raises(TopologyError) as info:
        read_topology(path)
    assert words in _one_line_naming(info.value, path)


def test_topology_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="is a directory"):
        read_topology(tmp_path)


def test_topology_errors_are_toolkit_input_errors() -> None:
    assert issubclass(TopologyError, SchedInputError)
    assert issubclass(InterferenceInputError, SchedInputError)


# --- items 12 and 18: perf stat ----------------------------------------------------------------------

RECORD = {"counter-value": "1000.0", "unit": "", "event": "cycles", "event-runtime": 5000,
          "pcnt-running": 100.0}


def test_deeply_nested_perf_json_is_a_parse_error() -> None:
    with pytest.raises(perf_stat.PerfStatParseError, match="line 1.*nested deeper"):
        perf_stat.parse("{" + '"a":[' * 100_000 + "]" * 100_000 + "}\n")


@pytest.mark.parametrize(("field", "value"), [
    ("pcnt-running", 150.0), ("pcnt-running", -1.0), ("counter-value", "nan"),
    ("counter-value", "inf"), ("counter-value", "-5"), ("event-runtime", -1),
    ("event-runtime", True), ("counter-value", 1e400),
])
def test_perf_json_refuses_impossible_numbers(field: str, value: object) -> None:
    line = json.dumps({**RECORD, field: value}).replace("Infinity", "1e400")
    with pytest.raises(perf_stat.PerfStatParseError, match=f"out, line 1: {field}"):
        perf_stat.parse_json(line + "\n", "out")


@pytest.mark.parametrize(("line", "field"), [
    ("1000,,cycles,5000,150.00,,", "pcnt-running"),
    ("nan,,cycles,5000,100.00,,", "counter-value"),
    ("inf,,cycles,5000,100.00,,", "counter-value"),
    ("-3,,cycles,5000,100.00,,", "counter-value"),
    ("1000,,cycles,-5000,100.00,,", "event-runtime"),
    ("1000,,cycles,5000,nan,,", "pcnt-running"),
])
def test_perf_csv_refuses_impossible_numbers(line: str, field: str) -> None:
    with pytest.raises(perf_stat.PerfStatParseError, match=f"out, line 2: {field}"):
        perf_stat.parse_csv("1,,instructions,10,100.00,,\n" + line + "\n", "out")


def test_procfs_parsers_refuse_negative_and_non_finite_counts() -> None:
    with pytest.raises(ProcfsParseError, match="/proc/stat"):
        parse_stat_cpu("cpu 1 2 -3 4 5 6 7 8 0 0\n", 100.0)
    with pytest.raises(ProcfsParseError, match="MemTotal"):
        parse_meminfo("MemTotal: nan kB\n")
    with pytest.raises(ProcfsParseError, match="MemTotal"):
        parse_meminfo("MemTotal:\n")


# --- item 13: efficiency ---------------------------------------------------------------------------

@pytest.mark.parametrize("init_bsz", [0, -5, 1_000_000, 129])
def test_init_bsz_outside_the_traced_range_is_an_error(init_bsz: int) -> None:
    traces = read_gradient_traces(pollux_model_dir("cifar10"))
    with pytest.raises(InputError, match=r"init_bsz.*expected an integer in \[1, 128\]"):
        EfficiencyModel.fit(traces, init_bsz=init_bsz)


def test_efficiency_lies_in_zero_one_for_batches_from_init_bsz() -> None:
    model = EfficiencyModel.fit(read_gradient_traces(pollux_model_dir("cifar10")), init_bsz=64)
    batch = np.array([64, 128, 1000, 10**6, 10**9])
    for quantile in (None, 0.05, 0.95):
        values = model.efficiency(batch, np.array([0.1, 0.5, 0.9])[:, None], quantile)
        assert np.all((values > 0) & (values <= 1))
    assert efficiency_from_noise(np.inf, 128, 4096) == 1.0


def test_cli_init_bsz_out_of_range_exits_2() -> None:
    init_bsz = "1000000"  # one subprocess: 0 and -5 take the same path (tested above)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "bayes_sched", "fit", "efficiency", "cifar10",
                           f"--init-bsz={init_bsz}"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"--init-bsz {init_bsz}" in done.stderr and done.stderr.count("\n") == 1


def test_two_files_of_one_batch_size_are_an_error_naming_both(tmp_path: Path) -> None:
    (tmp_path / "validation-128.csv").write_text(VALIDATION)
    (tmp_path / "validation-0128.csv").write_text(VALIDATION)
    with pytest.raises(InputError) as info:
        read_gradient_traces(tmp_path)
    message = str(info.value)
    assert "validation-128.csv" in message and "validation-0128.csv" in message


def test_batch_size_zero_in_the_file_name_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "validation-0.csv").write_text(VALIDATION)
    with pytest.raises(InputError, match="validation-0.csv: batch size in the name"):
        read_gradient_traces(tmp_path)


def test_a_wide_gradient_ratio_is_computed_without_warnings(tmp_path: Path) -> None:
    rows = ["progress,iteration,metric,grad_sqr,grad_var"]
    rows += [f"{100 * i},{10 * i},0.5,{1.0 / i},{0.5 * i}" for i in range(1, 6)]
    rows += ["600,60,0.5,1e-30,1e30"]  # var / sqr = 1e60: extreme, within float32 statistics
    path = tmp_path / "validation-128.csv"
    path.write_text("\n".join(rows) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = read_validation_csv(path)
        curve = NoiseScaleCurve.fit(trace)
        model = EfficiencyModel({128: curve}, 128)
        values = model.efficiency(np.array([128, 1024, 8192]), np.linspace(0, 1, 5)[:, None],
                                  0.95)
    assert curve.num_epochs == 6  # the extreme epoch counts, it is not dropped
    assert np.all(np.isfinite(values) & (values > 0) & (values <= 1))


@pytest.mark.parametrize("column", ["grad_sqr", "grad_var"])
def test_gradient_statistics_beyond_float32_are_refused(tmp_path: Path, column: str) -> None:
    # Pollux computes both statistics over float32 gradients: 1e308 is an overflow, and one such
    # row made the fitted efficiency 1 at every batch size.
    header = "progress,iteration,metric,grad_sqr,grad_var"
    cells = {"grad_sqr": "0.5", "grad_var": "2.0", column: "1e308"}
    path = tmp_path / "validation-128.csv"
    path.write_text(VALIDATION + f"400,40,0.8,{cells['grad_sqr']},{cells['grad_var']}\n")
    assert VALIDATION.startswith(header)
    with pytest.raises(InputError) as info:
        read_validation_csv(path)
    message = _one_line_naming(info.value, path)
    assert f"row 5, column '{column}'" in message and "3.40282e+38" in message


# --- item 14: non-physical step times ------------------------------------------------------------

def test_a_step_time_of_1e300_names_its_row(tmp_path: Path) -> None:
    path = tmp_path / "placements.csv"
    text = (pollux_model_dir("cifar10") / "placements.csv").read_text().splitlines()
    first = text[5].split(",")
    text[5] = ",".join([first[0], first[1], "1e300", first[3]])
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(InputError) as info:
        read_placements_csv(path)
    message = _one_line_naming(info.value, path)
    assert "row 6, column 'step_time'" in message and "3600" in message


# --- item 17: pairs table ------------------------------------------------------------------------

def test_a_pairs_row_with_an_extra_field_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text(PAIRS + "a,c,0.7,0.8,0.9\n")
    with pytest.raises(InterferenceInputError) as info:
        read_pairs_csv(path)
    assert "row 3" in _one_line_naming(info.value, path) and "5 fields" in str(info.value)


def test_a_duplicated_pairs_column_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text("job_a,job_b,speed_a,speed_b,speed_a\na,b,0.8,0.9,0.3\n")
    with pytest.raises(InterferenceInputError, match="row 1: column 'speed_a' appears twice"):
        read_pairs_csv(path)


def test_job_names_stay_strings_and_empty_names_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text("job_a,job_b,speed_a,speed_b\nNA,nan,0.8,0.9\n")
    pairs = read_pairs_csv(path)
    assert pairs["job_a"].tolist() == ["NA"] and pairs["job_b"].tolist() == ["nan"]
    path.write_text("job_a,job_b,speed_a,speed_b\na,b,0.8,0.9\n,b,0.8,0.9\n")
    with pytest.raises(InterferenceInputError, match="row 3, column 'job_a'"):
        read_pairs_csv(path)
    solo = tmp_path / "solo.csv"
    solo.write_text("job,util\na,0.5\n,0.25\n")
    with pytest.raises(InterferenceInputError, match="row 3, column 'job'"):
        read_solo_features_csv(solo)


def test_a_pairs_job_without_a_solo_row_names_the_pairs_file_row_and_column(
        tmp_path: Path) -> None:
    pairs_path, solo_path = tmp_path / "pairs.csv", tmp_path / "solo.csv"
    pairs_path.write_text("job_a,job_b,speed_a,speed_b\na,b,0.8,0.9\n\nb,nan,0.7,0.9\n")
    solo_path.write_text("job,util\na,0.5\nb,0.25\n")
    pairs, solo = read_pairs_csv(pairs_path), read_solo_features_csv(solo_path)
    with pytest.raises(InterferenceInputError) as info:
        check_pairs_known(pairs, solo, str(pairs_path), str(solo_path))
    message = _one_line_naming(info.value, pairs_path)
    assert "row 4, column 'job_b'" in message and "'nan'" in message and str(solo_path) in message
    solo_path.write_text("job,util\na,0.5\nb,0.25\nnan,0.1\n")  # a job named "nan" is a name
    check_pairs_known(pairs, read_solo_features_csv(solo_path))


@pytest.mark.parametrize(("reader", "text"), [
    ("jobs", "job,node,gpu,solo_step_s\nj0,node000,0,0.2\n"),
    ("step-times", "time,j0\n2027-01-15T08:00:00,0.3\n"),
])
@pytest.mark.parametrize("encoding", ["utf-16", "binary"])
def test_contention_job_tables_are_read_through_the_validation_layer(
        tmp_path: Path, reader: str, text: str, encoding: str) -> None:
    path = tmp_path / f"{reader}.csv"
    path.write_bytes(text.encode("utf-16") if encoding == "utf-16" else bytes(range(256)))
    with pytest.raises(TopologyError) as info:
        if reader == "jobs":
            read_jobs_csv(str(path))
        else:
            read_step_times_csv(str(path), None)  # type: ignore[arg-type]  # fails before use
    assert "UTF-16" in _one_line_naming(info.value, path) or "not UTF-8" in str(info.value)


def test_a_jobs_table_names_the_row_and_column_of_a_bad_cell(tmp_path: Path) -> None:
    path = tmp_path / "jobs.csv"
    path.write_text("job,node,gpu,solo_step_s\nj0,node000,0,0.2\nj1,node000,-1,0.2\n")
    with pytest.raises(TopologyError, match="row 3, column 'gpu'"):
        read_jobs_csv(str(path))
    path.write_text("job,node,gpu,solo_step_s\nj0,node000,0,0.2\n,node000,1,0.2\n")
    with pytest.raises(TopologyError, match="row 3, column 'job'"):
        read_jobs_csv(str(path))
    path.write_text("job,node,gpu,solo_step_s\nj0,node000,0,0.2\nj1,node000,1,0.4\n")
    jobs = read_jobs_csv(str(path))
    assert jobs["job"].tolist() == ["j0", "j1"] and jobs["gpu"].tolist() == [0, 1]
    assert jobs["solo_step_s"].tolist() == [0.2, 0.4]


def test_rows_after_blank_lines_keep_their_file_row_numbers(tmp_path: Path) -> None:
    path = tmp_path / "pairs.csv"
    path.write_text("job_a,job_b,speed_a,speed_b\na,b,0.8,0.9\n\n\na,c,0.8,7\n")
    with pytest.raises(InterferenceInputError, match="row 5, column 'speed_b'"):
        read_pairs_csv(path)


def test_a_directory_as_the_pairs_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(InterferenceInputError, match="is a directory"):
        read_pairs_csv(tmp_path)


def test_profile_checks_after_blank_lines_name_the_file_row(tmp_path: Path) -> None:
    path = tmp_path / "placements.csv"
    path.write_text("placement,local_bsz,step_time,sync_time\n1,32,0.04,0.0005\n\n2,32,0.05,0.07\n")
    with pytest.raises(InputError, match="row 4, column 'sync_time'"):
        read_placements_csv(path)


def test_a_quoted_newline_in_a_column_name_keeps_the_error_on_one_line(tmp_path: Path) -> None:
    # Found by the thorough property run: the header name was quoted into the message as it was.
    path = tmp_path / "placements.csv"
    path.write_bytes(b'"\x01\n\x01"\n\x01,')
    with pytest.raises(InputError) as info:
        read_step_time_profile(path)
    assert "row 3" in _one_line_naming(info.value, path) and "\\n" in str(info.value)
