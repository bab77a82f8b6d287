"""Steady-state throughput of Lambda's single-GPU rows, from the run logs Lambda published.

Lambda's deeplearning-benchmark tables (``pytorch/csv_v1_v2/*.csv``) divide a whole run by
its wall time, warm-up included: BERT's ``training_sequences_per_second`` is
``batch x max_steps / e2e_train_time`` where the timer starts before the first iteration
(CUDA context, cuBLAS/cuDNN set-up, allocator growth: 1-8 s), and ResNet-50's
``Summary ... train.total_ips`` is the mean of every iteration's rate, the first two
(cuDNN autotuning, ~30 and ~140 img/s) included. dpsim predicts the steady-state step,
so ``tests/data/single_gpu_throughput.csv`` scores the steady state of the same runs,
read from their logs (``pytorch/results*/<system>/<task>/*.txt``, one or more runs each):

* BERT: ``50 x batch / (t101 - t51)``, the 50 steps between the DLL log lines of
  ``Training Iteration: 51`` and ``Training Iteration: 101``;
* ResNet-50: the median of the per-iteration ``train.total_ips``.

Several runs of one system are averaged, as Lambda's table does. Run once, by hand::

    git clone https://github.com/lambdal/deeplearning-benchmark /tmp/ldb
    git -C /tmp/ldb checkout aa5addb6a53675a649a80036dad548f1c27cbcc4
    python validation/lambda_logs.py /tmp/ldb

It prints, for every row of the CSV whose source is Lambda, the directory it reads, the
published figure recomputed from the logs (a check that the directory is the right one)
and the steady state; ``--write`` stores the steady state as the row's ``samples_per_s``
(``published_samples_per_s`` keeps the table's figure) and names the logs in its source.
CI never needs the clone.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import io
import re
import statistics
import sys
from pathlib import Path

from dpsim.files import write_text_atomic

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "single_gpu_throughput.csv"

SYSTEMS = {
    "LambdaCloud 1x V100 16GB": "results/LambdaCloud_V100_16GB_v1",
    "LambdaCloud 1x A10": "results/LambdaCloud_A10_v1",
    "LambdaCloud 1x A100 40GB PCIe": "results/LambdaCloud_A100_40GB_PCIe_v1",
    "A100 80GB PCIe": "results/A100_80GB_PCIe_v1",
    "A100 80GB SXM4": "results/A100_80GB_SXM4_v1",
    "RTX 3090": "results/3090_v1",
    "LambdaCloud 1x H100 80GB PCIe": "results_v2/LambdaOD_1x_Texas_1xH100_80GB_PCIe_209-20-158-50_v2",
    "LambdaCloud 1x H100 80GB SXM5": "results_v2/LambdaOD_1x_Texas_1xH100_80GB_SXM5_192-222-52-129_v2",
    "LambdaCloud 1x GH200 96GB": "results_v2/LambdaOD_1x_1xGH200_96GB_192-222-57-0_v2",
    "LambdaCloud 1x B200 192GB SXM5": "results_v2/LambdaOD_test_1xB200_192GB_129-213-83-251_v2",
    # Engineering runs with logs but no row in Lambda's tables: their "published" figure is
    # the logs' own whole-run summary, as the tables would print it.
    "LambdaBM ENG04 1x H200 141GB SXM": "results_v2/LambdaBM_ENG04_1xH200_140GB_SXM_h200_v2",
}
"""Lambda's row name (``name_gpu`` of ``pytorch/csv_v1_v2``) -> its results directory under
``pytorch/``; each matches the published figure (checked by this script). The H200 runs are
not in the tables: their rows' "published" figure is recomputed from the logs here."""

TASKS = {("bert-large", True): "PyTorch_bert_large_squad_FP16", ("bert-large", False): "PyTorch_bert_large_squad_FP32",
         ("resnet50", True): "PyTorch_resnet50_AMP", ("resnet50", False): "PyTorch_resnet50_FP32"}

LOG_METHOD_BERT = ("steady state from the run logs {folder}/*.txt: 50 steps x batch over the time between "
                   "the 'Training Iteration: 51' and '101' log lines (validation/lambda_logs.py)")
LOG_METHOD_RESNET = ("steady state from the run logs {folder}/*.txt: median of the per-iteration "
                     "train.total_ips (validation/lambda_logs.py)")

_DLL_STEP = re.compile(r"DLL (\S+ \S+) - Training Epoch: \d+ Training Iteration: (\d+)")
_ITER_IPS = re.compile(r"Epoch: \d+ Iteration: \d+ .*?train\.total_ips : ([\d.]+)")
_SUMMARY_IPS = re.compile(r"Summary: train\.loss .*?train\.total_ips : ([\d.]+)")
_SEQ_PER_S = re.compile(r"training_sequences_per_second : ([\d.]+)")
_BATCH = re.compile(r"--train_batch_size=(\d+)")


def bert_run(text: str) -> tuple[float, float]:
    """(published, steady) sequences/s of one BERT log."""
    stamps = {int(i): datetime.datetime.fromisoformat(t) for t, i in _DLL_STEP.findall(text)}
    batch = int(_BATCH.search(text).group(1))
    steady = 50 * batch / (stamps[101] - stamps[51]).total_seconds()
    return float(_SEQ_PER_S.findall(text)[-1]), steady


def resnet_run(text: str) -> tuple[float, float]:
    """(published, steady) images/s of one ResNet-50 log."""
    rates = [float(x) for x in _ITER_IPS.findall(text)]
    return float(_SUMMARY_IPS.findall(text)[-1]), statistics.median(rates)


def derive(repo: Path, system: str, model: str, sixteen_bit: bool) -> tuple[str, float, float]:
    """(directory, published, steady) of one system and task, averaged over its runs."""
    folder = repo / "pytorch" / SYSTEMS[system] / TASKS[(model, sixteen_bit)]
    runs = [bert_run(p.read_text()) if model == "bert-large" else resnet_run(p.read_text())
            for p in sorted(folder.glob("*.txt"))]
    if not runs:
        raise SystemExit(f"no run logs in {folder}")
    return (str(folder.relative_to(repo)), statistics.mean(p for p, _ in runs),
            statistics.mean(s for _, s in runs))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("repo", type=Path, help="a checkout of lambdal/deeplearning-benchmark at aa5addb6a536")
    ap.add_argument("--write", action="store_true", help="store the steady states in the CSV")
    args = ap.parse_args()
    with open(DATA, newline="") as f:
        reader = csv.DictReader(f)
        fields, rows = list(reader.fieldnames or ()), list(reader)
    for r in rows:
        if not r["source"].startswith("lambdal/"):
            continue
        system = r["system"].removeprefix("Lambda ").strip("'")
        sixteen_bit = r["precision"] not in ("fp32", "tf32")
        folder, published, steady = derive(args.repo, system, r["model"], sixteen_bit)
        print(f"{r['id']} {folder}: published {published:.1f} (table {r['published_samples_per_s']}), "
              f"steady state {steady:.1f} (csv {r['samples_per_s']})")
        if args.write:
            method = (LOG_METHOD_BERT if r["model"] == "bert-large" else LOG_METHOD_RESNET).format(folder=folder)
            r["samples_per_s"] = f"{steady:.1f}"
            if "steady state from" not in r["source"]:
                r["source"] = f"{r['source']}; {method}"
    if args.write:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        write_text_atomic(DATA, out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
