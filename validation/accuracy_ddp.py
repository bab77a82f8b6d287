"""Multi-GPU DDP throughput predicted from a measured one-GPU step, against published runs.

``python validation/accuracy_ddp.py`` predicts every row of ``tests/data/ddp_scaling_reference.csv``
(ResNet-50 trained with PyTorch DDP on 2, 4 and 8 GPUs of one server, each row citing the run
logs it comes from) from the one-GPU throughput measured on the same system: dpsim is given
that step (``--single-gpu-step-ms``: batch / one-GPU samples per second) and simulates DDP's
buckets, its own costs (bucket copies, buffer broadcast, forward wrapper), NCCL's collectives
on the server's NVLink and the overlap with backward. It prints predicted vs measured
samples per second, the median and worst |predicted / measured - 1|, and the same
leaving each system out. Nothing in the model is fitted on these rows (the compute is the
measured step, every other number comes from presets and constants cited where they are
defined), so leaving a system out changes no prediction; the script checks that.
``--write`` rewrites VALIDATION.md's section (between its markers; appended when absent).

Topologies: ``nvlink`` (NVSwitch) for the H100, H200 and B200 servers with the GPU preset
of the row. The A100 SXM4 and V100 rows (Lambda's ``pytorch/results/``, late 2022) were run with
``NCCL_P2P_DISABLE=1``, so they used neither NVSwitch nor the V100s' NVLink mesh but NCCL's SHM
transport through host memory: they are costed on the servers' PCIe trees with ``node.p2p: false``
(validation/systems/lambda-h12dgo-a100sxm4-shm-x8.yaml, lambdacloud-v100sxm2-shm-x8.yaml), where
DDP's all-reduce follows backward (``node.shm_overlaps_backward`` left false; their ``notes``
say so; see validation/large_model_runs.md and validation/pcie_runs.md). A row's ``topology`` names
a file of validation/systems/ when one exists, a shipped preset otherwise.
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from dpsim.files import write_text_atomic
from dpsim.predict import PredictConfig, predict

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "ddp_scaling_reference.csv"
SYSTEMS_DIR = ROOT / "validation" / "systems"
VALIDATION = ROOT / "VALIDATION.md"
BEGIN = "<!-- accuracy_ddp: begin -->"
END = "<!-- accuracy_ddp: end -->"


@dataclass(frozen=True)
class Result:
    row: dict
    predicted: float

    @property
    def measured(self) -> float:
        return float(self.row["samples_per_s"])

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


def rows(path: Path = DATA) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def config_of(row: dict) -> PredictConfig:
    """A row as ``dpsim predict`` runs it: a shipped topology preset (``--link``), or a server of
    validation/systems/ (``--topology``) for the runs whose data path no preset describes."""
    n = int(row["gpus"])
    batch = int(row["micro_batch"])
    system = SYSTEMS_DIR / f"{row['topology']}.yaml"
    where = {"topology_file": str(system)} if system.exists() else {"link": row["topology"], "gpus_per_node": n}
    return PredictConfig(gpus=n, **where, gpu=row["gpu"], model=row["model"],
                         micro_batch=batch, precision=row["precision"], optimizer="sgd-momentum",
                         single_gpu_step_s=batch / float(row["single_gpu_samples_per_s"]))


def predict_rows(data: Iterable[dict]) -> list[Result]:
    return [Result(row=r, predicted=predict(config_of(r)).samples_per_s) for r in data]


def summary(results: list[Result]) -> tuple[float, float]:
    errors = [abs(r.error) for r in results]
    return statistics.median(errors), max(errors)


def leave_one_system_out(data: list[dict]) -> list[Result]:
    """Each system's rows predicted with whatever is fitted on the others: nothing is, so the
    predictions are the plain ones (checked)."""
    out = []
    for system in dict.fromkeys(r["system"] for r in data):
        out += predict_rows(r for r in data if r["system"] == system)
    return out


def table(results: list[Result]) -> str:
    lines = ["| id | system | precision | GPUs | 1-GPU measured | measured | predicted | error |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        row = r.row
        lines.append(f"| {row['id']} | {row['system']} | {row['precision']} | {row['gpus']} | "
                     f"{float(row['single_gpu_samples_per_s']):,.0f} | {r.measured:,.0f} | {r.predicted:,.0f} | "
                     f"{100 * r.error:+.1f} % |")
    return "\n".join(lines)


def section(results: list[Result], loso: list[Result]) -> str:
    med, worst = summary(results)
    lmed, lworst = summary(loso)
    by_system: dict[str, list[float]] = {}
    for r in results:
        by_system.setdefault(r.row["system"], []).append(abs(r.error))
    systems = "; ".join(f"{s} {100 * statistics.median(e):.1f} %" for s, e in by_system.items())
    return "\n".join([
        BEGIN,
        "## Multi-GPU DDP step from a measured one-GPU step (issue 12)",
        "",
        "Generated by `python validation/accuracy_ddp.py --write`; checked by `tests/test_accuracy_ddp.py`.",
        f"{len(results)} published runs of ResNet-50 trained with PyTorch DDP (NVIDIA DeepLearningExamples'",
        "ConvNets, torch DDP with its defaults, synthetic data, SGD momentum) on 2, 4 and 8 GPUs of one",
        "server, from Lambda's run logs (`tests/data/ddp_scaling_reference.csv`, every row citing its",
        "logs: lambdal/deeplearning-benchmark@aa5addb6a536, steady state = median of the per-iteration",
        "throughput). dpsim gets the one-GPU step measured on the same system (`--single-gpu-step-ms`) and",
        "predicts the N-GPU throughput: DDP's buckets and own costs (bucket copies in and back, buffer",
        "broadcast, forward wrapper), NCCL on the server's NVLink, overlap with backward.",
        "",
        (f"**|predicted / measured - 1|: median {100 * med:.1f} %, worst {100 * worst:.1f} %** "
         f"(target: median <= 5 %, worst <= 15 %). Leaving each system out: median {100 * lmed:.1f} %, "
         f"worst {100 * lworst:.1f} % (nothing is fitted on these rows: the compute is the measured step,"),
        "everything else comes from presets and constants cited where they are defined, so leaving a",
        f"system out changes nothing). Median per system: {systems}.",
        "",
        "Where it misses: dpsim predicts 98-99 % scaling for every server (ResNet-50 communicates 102 MB",
        "a step, hidden behind backward but for the last buckets; DDP's copies, 161 gradients in and",
        "back, and its buffer broadcast cost about 1 %). The H100, H200 and B200 servers measure",
        "98.7-99.5 %. The A100 SXM4 rows measure 87-96 % and the V100 rows 93-96 %, from Lambda's older",
        "result set (`pytorch/results/`, PyTorch 1.13.0a0, one session per server in order of GPU count:",
        "A100 on 2022-11-19, V100 on 2022-12-16), and those runs did not use NVLink: Lambda's",
        "`benchmark_pytorch.sh` exported `NCCL_P2P_DISABLE=1` from lambdal/deeplearning-benchmark@0a684b62",
        "(2022-10-16) until @aad0d1cd (2023-02-06), so NCCL passed the gradients through host memory (its",
        "SHM transport), which dpsim does not model. The same image with P2P on (8x H100 SXM5, 2023-02-14)",
        "scales 99.0-99.5 %, and the same A100 board did 99.4-99.5 % in 2021; no source prices the SHM path",
        "on these servers, so the rows stay as measured (validation/large_model_runs.md, 'The A100 SXM4 and",
        "V100 DDP rows ran with NCCL P2P disabled').",
        "",
        table(results),
        "",
        "### Models from libraries",
        "",
        "`--model transformers:...` was checked by hand against the real transformers 5.24.0 (a side",
        "virtual environment; the test extra does not install it): `GPT2Config(n_layer=2)` traced to",
        "53,561,088 parameters and 1,024 tokens, a 2-layer `LlamaConfig(hidden_size=256, ...)` to",
        "1,692,928, `BertForMaskedLM(num_hidden_layers=2)` and `BertConfig(num_hidden_layers=2)` to the",
        "same 38,635,578 (masked-LM head), each with its buffers (position ids), and a 16-layer Llama",
        "predicted end to end. torchvision from PyPI does not import beside this machine's torch",
        "2.13.0 CPU build, so `torchvision.models:...` is tested only against `tests/stubs/`",
        "(`tests/test_library_models.py`: the stand-in's ResNet-18 has torchvision's 11,689,512",
        "parameters and 1.81 GMACs per 224 x 224 image).",
        END,
    ])


def write_section(text: str) -> None:
    old = VALIDATION.read_text() if VALIDATION.exists() else ""
    if BEGIN in old and END in old:
        head, rest = old.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        new = head + text + tail
    else:
        new = old.rstrip("\n") + "\n\n" + text + "\n"
    write_text_atomic(VALIDATION, new)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite VALIDATION.md's section")
    args = ap.parse_args()
    data = rows()
    results = predict_rows(data)
    loso = leave_one_system_out(data)
    assert [r.predicted for r in results] == [r.predicted for r in sorted(loso, key=lambda r: data.index(r.row))]
    print(table(results))
    med, worst = summary(results)
    print(f"median {100 * med:.1f} %, worst {100 * worst:.1f} % over {len(results)} rows (leave-one-system-out: "
          f"the same, nothing fitted)")
    if args.write:
        write_section(section(results, loso))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
