"""nccl-tests logs: the parser on the published runs, format variants, bad logs, and the
round trip ``calibrate --from-nccl-tests`` -> ``collective``/``predict --calibration``."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest

from dpsim.calibrate.build import profile_from_nccl_tests
from dpsim.calibrate.nccl_tests import parse_nccl_tests
from dpsim.cli import main
from dpsim.errors import ProfileError
from dpsim.profile.io import load_profile

REPO = Path(__file__).resolve().parents[1]
CALIBRATION = REPO / "calibration"
ROWS_CSV = CALIBRATION / "reference" / "collectives_reference.csv"
LOGS = CALIBRATION / "reference" / "nccl-tests"
SHARED_CSV = REPO.parent / "shared" / "reference" / "collectives.csv"


def _script():
    spec = importlib.util.spec_from_file_location("fit_reference_profiles", CALIBRATION / "fit_reference_profiles.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _rows() -> dict[str, dict]:
    with ROWS_CSV.open(newline="", encoding="utf-8") as fh:
        return {r["id"]: r for r in csv.DictReader(fh)}


def _log_for(rows: list[dict]) -> Path:
    first = rows[0]["id"]
    hits = [p for p in LOGS.glob("*.log") if f"# source: {first}.." in p.read_text()]
    assert len(hits) == 1, f"one log cites {first}"
    return hits[0]


def run_cli(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


# --------------------------------------------------------------------------- published runs


def _published_groups():
    mod = _script()
    seen = set()
    for spec in mod.PROFILES.values():
        for lo, hi in spec["logs"].values():
            if (lo, hi) not in seen:
                seen.add((lo, hi))
                yield lo, hi


@pytest.mark.parametrize("lo, hi", list(_published_groups()))
def test_parser_reads_the_published_runs_exactly(lo, hi):
    rows = _script().row_range(_rows(), lo, hi)
    log = parse_nccl_tests(_log_for(rows))
    assert log.op == "all_reduce"
    assert log.n_ranks == int(rows[0]["gpus"]) and log.n_nodes == int(rows[0]["nodes"])
    assert log.dtype == "float"
    assert [m.size_bytes for m in log.measurements] == [float(r["message_bytes_or_batch"]) for r in rows]
    assert [m.time_s for m in log.measurements] == pytest.approx([float(r["value"]) * 1e-6 for r in rows], rel=1e-6)
    assert any(lo in s for s in log.sources), "the log cites its rows"


def test_reference_rows_are_a_verbatim_copy_of_the_shared_csv():
    if not SHARED_CSV.exists():
        pytest.skip(f"{SHARED_CSV} not present (CI uses the copy in calibration/reference/)")
    with SHARED_CSV.open(newline="", encoding="utf-8") as fh:
        shared = {r["id"]: r for r in csv.DictReader(fh)}
    for rid, row in _rows().items():
        assert shared[rid] == row, rid


def test_shipped_profiles_are_what_the_script_fits(tmp_path):
    _script().main(["--out-dir", str(tmp_path)])
    shipped = sorted((CALIBRATION / "profiles").glob("*.json"))
    assert {p.name for p in shipped} == {"a100-nvswitch-8gpu.json", "aws-p4de-2node.json", "aws-p5-2node.json"}
    for path in shipped:
        fresh = json.loads((tmp_path / path.name).read_text())
        old = json.loads(path.read_text())
        assert fresh["collectives"] == old["collectives"], f"{path.name} is stale: rerun the script"
        assert old["sources"] and all("C0" in s for s in old["sources"])
        load_profile(path)  # valid


def test_shipped_profiles_reproduce_their_rows_closely():
    rows = _rows()
    for name in ("a100-nvswitch-8gpu", "aws-p4de-2node", "aws-p5-2node"):
        profile = load_profile(name)
        for (lc, op), cal in profile.ops.items():
            assert cal.fit.worst_rel_residual < 0.05, (name, lc, op)
            for m in cal.measurements:
                assert m.source
            ids = [s for s in cal.sources if s.startswith("C0")]
            assert ids, "each fit cites its rows"
        assert profile.method == "nccl-tests" and not profile.warnings
    assert rows


# --------------------------------------------------------------------------- format variants

OLD_FORMAT = """\
# nThread 1 nGpus 4 minBytes 1024 maxBytes 4194304 step: 4(factor) warmup iters: 5 iters: 20 validation: 1
#
# Using devices
#   Rank  0 Pid  40534 on       dgx1 device  0 [0x06] Tesla V100-SXM2-16GB
#   Rank  1 Pid  40534 on       dgx1 device  1 [0x07] Tesla V100-SXM2-16GB
#   Rank  2 Pid  40534 on       dgx1 device  2 [0x0a] Tesla V100-SXM2-16GB
#   Rank  3 Pid  40534 on       dgx1 device  3 [0x0b] Tesla V100-SXM2-16GB
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        1024           256   float     sum    12.11    0.08    0.13  5e-07    12.03    0.09    0.13  5e-07
        4096          1024   float     sum    12.52    0.33    0.49  5e-07    12.46    0.33    0.49  5e-07
       16384          4096   float     sum    14.66    1.12    1.68  5e-07    14.54    1.13    1.69  5e-07
       65536         16384   float     sum    21.77    3.01    4.52  5e-07    21.62    3.03    4.55  5e-07
      262144         65536   float     sum    37.95    6.91   10.36  5e-07    37.75    6.94   10.42  5e-07
     1048576        262144   float     sum    86.28   12.15   18.23  5e-07    86.11   12.18   18.27  5e-07
     4194304       1048576   float     sum   276.41   15.17   22.76  5e-07   276.06   15.19   22.79  5e-07
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 8.25
"""


def test_old_layout_without_root_and_with_error_column(tmp_path):
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(OLD_FORMAT)
    log = parse_nccl_tests(path)
    assert log.op == "all_reduce" and log.n_ranks == 4 and log.n_nodes == 1
    assert log.device_names == ("Tesla V100-SXM2-16GB",)
    assert len(log.measurements) == 7 and log.measurements[-1].time_s == pytest.approx(276.41e-6)


def test_nccl_info_lines_and_trailing_noise_are_skipped(tmp_path):
    noisy = OLD_FORMAT.replace(
        "       16384          4096",
        "10-0-0-1:40534:40600 [0] NCCL INFO Channel 00/02 : 0 1 2 3\n       16384          4096")
    noisy += "10-0-0-1:40534:40534 [0] NCCL INFO comm 0x55 rank 0 nranks 4 - Destroy COMPLETE\n"
    path = tmp_path / "allreduce.txt"
    path.write_text(noisy)
    assert len(parse_nccl_tests(path).measurements) == 7


def test_op_from_collective_test_starting_line(tmp_path):
    path = tmp_path / "run1.log"
    path.write_text("# Collective test starting: all_gather_perf\n" + OLD_FORMAT.replace("   sum", "  none"))
    assert parse_nccl_tests(path).op == "all_gather"


def test_op_from_command_line_in_log(tmp_path):
    path = tmp_path / "run2.log"
    path.write_text("$ mpirun -np 4 ./build/reduce_scatter_perf -b 1K -e 4M -f 4\n" + OLD_FORMAT)
    assert parse_nccl_tests(path).op == "reduce_scatter"


def test_without_device_list_ranks_come_from_busbw_and_nodes_from_the_flag(tmp_path):
    trimmed = "\n".join(l for l in OLD_FORMAT.splitlines() if "Rank" not in l) + "\n"
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(trimmed)
    with pytest.raises(ProfileError, match="--ranks-per-node"):
        parse_nccl_tests(path)
    log = parse_nccl_tests(path, ranks_per_node=4)
    assert log.n_ranks == 4 and log.n_nodes == 1  # busbw/algbw = 22.76/15.17 = 2(N-1)/N -> N = 4


# --------------------------------------------------------------------------- bad logs


@pytest.mark.parametrize("name, text, needle", [
    ("all_reduce_perf.log", "hello\nworld\n", "no nccl-tests result table"),
    ("mystery.log", OLD_FORMAT, "cannot tell which collective"),
    ("all_reduce_perf.log", OLD_FORMAT.replace("  86.28   12.15", "  86.28"), "line 17: 11 columns where the header has 12"),
    ("all_reduce_perf.log", OLD_FORMAT.replace("86.28", "fast!"), "line 17: expected numbers"),
    ("all_reduce_perf.log", OLD_FORMAT.replace("  1048576        262144", "  1048576        262143"),
     "is not count"),
    ("all_reduce_perf.log", "\n".join(OLD_FORMAT.splitlines()[:12]) + "\n", "usable row"),
    # float() reads nan and inf: they reached the fit, whose error named neither the flag nor the line
    # ("size np.float64(1048576.0) B, time np.float64(nan) s is not valid").
    ("all_reduce_perf.log", OLD_FORMAT.replace("86.28", "nan", 1), "line 17: time nan us is not a positive"),
    ("all_reduce_perf.log", OLD_FORMAT.replace("86.28", "inf", 1), "line 17: time inf us is not a positive"),
    # 1e-300 us reached the fit as numpy's LinAlgError traceback; 1e308 us failed the profile's schema
    # in two lines that named neither the flag nor the line.
    ("all_reduce_perf.log", OLD_FORMAT.replace("86.28", "1e-300", 1), "line 17: time 1e-300 us is not valid"),
    ("all_reduce_perf.log", OLD_FORMAT.replace("86.28", "1e308", 1), "line 17: time 1e308 us is not valid"),
])
def test_malformed_logs_give_one_clear_line(capsys, tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ProfileError, match=needle):
        parse_nccl_tests(path)
    rc, out, err = run_cli(capsys, "calibrate", "--from-nccl-tests", str(path), "--out", str(tmp_path / "p.json"))
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dpsim: error: --from-nccl-tests:") and needle.split(":")[0] in lines[0]
    assert str(path) in lines[0]
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("flag, value", [("--model", "gpt2"), ("--nproc", "4"), ("--ops", "all_reduce"),
                                         ("--backend", "gloo")])
def test_measuring_flags_with_from_nccl_tests_are_refused(capsys, tmp_path, flag, value):
    # They were silently ignored: --model gpt2 gave a profile without the model's step, exit status 0.
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(OLD_FORMAT)
    rc, _, err = run_cli(capsys, "calibrate", "--from-nccl-tests", str(path), flag, value,
                         "--out", str(tmp_path / "p.json"))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"dpsim: error: {flag}: ") and value in err
    assert "applies to a measurement; --from-nccl-tests only fits the logs given" in err
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("args, needle", [
    # Measurement flags with defaults of their own were dropped, invalid values included (fuzz5):
    # --budget -1 or --ci 5 with --from-nccl-tests wrote a profile with exit status 0.
    (["--budget", "-1"], "--budget: -1.0 applies to a measurement"),
    (["--ci", "5"], "--ci: 5.0 applies to a measurement"),
    (["--timeout", "30"], "--timeout: 30.0 applies to a measurement"),
    (["--no-compute"], "--no-compute: applies to a measurement"),
    (["--fresh-processes", "0"], "--fresh-processes: 0 applies to a measurement"),
    (["--optimizer", "sgd"], "--optimizer: 'sgd' applies to a measurement"),
    (["--micro-batch", "2"], "--micro-batch: 2 applies to a measurement"),
])
def test_measuring_flags_with_defaults_are_refused_with_from_nccl_tests(capsys, tmp_path, args, needle):
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(OLD_FORMAT)
    rc, _, err = run_cli(capsys, "calibrate", "--from-nccl-tests", str(path), *args, "--out", str(tmp_path / "p.json"))
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"dpsim: error: {needle}"), err
    assert not (tmp_path / "p.json").exists()


def test_ranks_per_node_that_contradicts_the_device_list_is_refused(capsys, tmp_path):
    # The device list wins, and a --ranks-per-node that disagreed with it was silently dropped (fuzz5).
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(OLD_FORMAT)
    with pytest.raises(ProfileError, match=r"--ranks-per-node 3 contradicts the log's device list \(4 ranks on 1 "
                                           r"host, 4 per host\)"):
        parse_nccl_tests(path, ranks_per_node=3)
    assert parse_nccl_tests(path, ranks_per_node=4).n_nodes == 1  # agreeing with the list is fine
    rc, _, err = run_cli(capsys, "calibrate", "--from-nccl-tests", str(path), "--ranks-per-node", "2",
                         "--out", str(tmp_path / "p.json"))
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--ranks-per-node 2 contradicts" in err
    assert not (tmp_path / "p.json").exists()


def test_missing_log_and_missing_flag(capsys, tmp_path):
    rc, _, err = run_cli(capsys, "calibrate", "--from-nccl-tests", str(tmp_path / "nope.log"))
    assert rc == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1
    rc, _, err = run_cli(capsys, "calibrate", str(tmp_path / "nope.log"))
    assert rc == 2 and "without --from-nccl-tests" in err
    rc, _, err = run_cli(capsys, "calibrate", "--from-nccl-tests")
    assert rc == 2 and "no log files" in err


def test_one_communicator_size_per_link_class(tmp_path):
    a = tmp_path / "all_reduce_perf.log"
    a.write_text(OLD_FORMAT)
    # The same times on 8 ranks: busbw is 2(N-1)/N = 1.75 x algbw there (the parser checks the list against it).
    rows = [line.split() if line[:1] == " " else None for line in OLD_FORMAT.splitlines()]
    table = "\n".join(line if tok is None else "  ".join(tok[:6] + [f"{float(tok[5]) * 1.75:.2f}"] + tok[7:10]
                                                           + [f"{float(tok[9]) * 1.75:.2f}"] + tok[11:])
                      for line, tok in zip(OLD_FORMAT.splitlines(), rows)) + "\n"
    eight = table.replace("nGpus 4", "nGpus 8") + "".join(
        f"#   Rank  {r} Pid  40534 on       dgx1 device  {r} [0x0b] Tesla V100-SXM2-16GB\n" for r in range(4, 8))
    b = tmp_path / "all_reduce_perf_8.log"
    b.write_text(eight)
    with pytest.raises(ProfileError, match="one communicator size per link class"):
        profile_from_nccl_tests([a, b])


# --------------------------------------------------------------------------- round trip


def test_from_nccl_tests_round_trip_into_collective_and_predict(capsys, tmp_path):
    rows = _script().row_range(_rows(), "C001", "C007")
    log = _log_for(rows)
    out = tmp_path / "a100.json"
    rc, text, err = run_cli(capsys, "calibrate", "--from-nccl-tests", str(log), "--out", str(out))
    assert rc == 0, err
    assert "measured" in text and "fitted" in text and "breaks between" in text
    profile = load_profile(out)
    assert profile.environment["hosts"] == 1 and profile.environment["world_size"] == 8
    # collective --calibration at the measured communicator reproduces the published times
    d = json.loads(run_cli(capsys, "collective", "--calibration", str(out), "--gpus", "8", "--link", "nvlink",
                           "-b", "32K", "-e", "16G", "-f", "8", "--json")[1])
    assert d["algorithm"] == "calibrated"
    measured = {int(r["message_bytes_or_batch"]): float(r["value"]) * 1e-6 for r in rows}
    for row in d["rows"]:
        if row["size_bytes"] in measured:
            assert row["time_s"] == pytest.approx(measured[row["size_bytes"]], rel=0.05)
    # ... and predict uses it (ring preset vs calibrated NVSwitch node differ)
    cal = json.loads(run_cli(capsys, "predict", "--calibration", str(out), "--gpus", "8", "--link", "nvlink",
                             "--model", "gpt2-xl", "--json")[1])
    preset = json.loads(run_cli(capsys, "predict", "--gpus", "8", "--link", "nvlink", "--model", "gpt2-xl",
                                "--json")[1])
    assert cal["config"]["calibration"] == str(out)
    assert cal["comm_s"] != pytest.approx(preset["comm_s"], rel=1e-3)
    assert cal["comm_s"] > 0 and cal["step_time_s"] >= cal["compute_s"]


def test_multi_node_prediction_needs_an_inter_node_class(capsys, tmp_path):
    rc, _, err = run_cli(capsys, "predict", "--calibration", "a100-nvswitch-8gpu", "--gpus", "16",
                         "--link", "infiniband")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "no inter_node measurements" in err and "across nodes" in err
    rc, _, err = run_cli(capsys, "collective", "--calibration", "aws-p5-2node", "--gpus", "8", "--link", "infiniband")
    assert rc == 2 and "no intra_node measurements" in err


def test_a_device_or_a_huge_log_is_refused_without_reading_it(capsys, tmp_path):
    """/dev/zero never ends: refused before it is opened; a log past the input cap is refused
    after reading just past the cap (issue 14)."""
    from dpsim.limits import MAX_INPUT_FILE_BYTES

    rc, _, err = run_cli(capsys, "calibrate", "--from-nccl-tests", "/dev/zero", "--out", str(tmp_path / "p.json"))
    assert rc == 2 and "not a regular file" in err and len(err.strip().splitlines()) == 1
    big = tmp_path / "big.log"
    with open(big, "wb") as fh:
        fh.truncate(MAX_INPUT_FILE_BYTES + 10)  # sparse: costs no disk
    rc, _, err = run_cli(capsys, "calibrate", "--from-nccl-tests", str(big), "--out", str(tmp_path / "p.json"))
    assert rc == 2 and "larger than" in err and "--from-nccl-tests" in err
    assert not (tmp_path / "p.json").exists()


def test_a_file_stem_that_cannot_name_the_profile_is_refused_naming_the_flag(capsys, tmp_path):
    # The profile takes the --out file's stem as its name; one with an escape sequence was written, then
    # refused by every later load (the loader wants one printable line), in a message naming no flag.
    log = tmp_path / "all_reduce_perf.log"
    log.write_text(OLD_FORMAT)
    rc, out, err = run_cli(capsys, "calibrate", "--from-nccl-tests", str(log), "--out", str(tmp_path / "a\x1bb.json"))
    assert rc == 2 and err.count("\n") == 1 and err.startswith("dpsim: error: --out: ") and "give --name" in err
    assert not list(tmp_path.glob("*.json"))
    rc, out, err = run_cli(capsys, "calibrate", "--from-nccl-tests", str(log), "--out", str(tmp_path / "a\x1bb.json"),
                           "--name", "ok")
    assert rc == 0


def test_out_never_replaces_a_file_the_command_reads(tmp_path, capsys):
    # --out LOG --force wrote the profile over the nccl-tests log being fitted; --out net.py (the
    # --model file) would have replaced the model's code.
    import shutil

    log = tmp_path / "all_reduce_perf.log"
    shutil.copy(sorted(LOGS.glob("*.log"))[0], log)
    before = log.read_text()
    assert main(["calibrate", "--from-nccl-tests", str(log), "--out", str(log), "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "--from-nccl-tests file it reads" in err
    assert log.read_text() == before
    net = tmp_path / "net.py"
    net.write_text("import torch\ndef build():\n    return torch.nn.Linear(4, 4)\n")
    assert main(["calibrate", "--backend", "gloo", "--nproc", "2", "--model", f"{net}:build", "--input-shape", "2,4",
                 "--out", str(net), "--force"]) == 2
    assert "--model file it reads" in capsys.readouterr().err and "def build" in net.read_text()


@pytest.mark.parametrize("name", ["node", "node.jsn", "profiles/node.txt"])
def test_out_without_json_is_one_line_before_any_work(name, capsys, tmp_path):
    """``--out`` names a .json file, as --html and plan's -o name theirs: ``--out node`` wrote a file 'node' that
    ``--calibration node`` and a mix file's ``calibration: node`` then read as a shipped profile's name."""
    (tmp_path / "profiles").mkdir()
    log = next(LOGS.glob("*.log"))
    out = tmp_path / name
    rc = main(["calibrate", "--from-nccl-tests", str(log), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "is not a .json file; give a path ending in .json" in err, err
    assert f"{out}.json" in err and not out.exists()
    from dpsim.calibrate.command import check_out
    assert check_out(tmp_path / "node.json", force=False) == tmp_path / "node.json"
    assert check_out(tmp_path / "NODE.JSON", force=False) == tmp_path / "NODE.JSON"
