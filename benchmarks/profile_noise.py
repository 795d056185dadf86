"""profile-diff against noise: does a planted op rank first in fresh trace pairs, and does an identical pair show nothing?

Each pair is two sides of --captures captures each (default 3; 1 gives a pair of single
traces), every capture separate and one after the other as `accelport profile --captures`
makes them (no interleaving of the two sides' steps): the base model, then either the same model
with one small extra matmul in one block, --planted-rows rows of the block's hidden
activations times a [512, 512] weight, a few percent of a step (a "planted" pair) or the base model again (an
"identical" pair). Each trace holds --steps ProfilerSteps of an MLP stack on the CPU,
one intra-op thread. For every planted pair the benchmark records the rank of the
planted (module, op) row under profile-diff's ranking, and, for comparison in the same
run, its rank when rows are ordered by their delta alone (what profile-diff did before
it knew noise). For every identical pair it counts the rows marked significant or
structural.

--load N starts N busy-loop processes for the whole run, to measure on a loaded
machine (use 2 on a 2-core machine). Targets: planted first in every planted pair,
no significant row in any identical pair.

    python benchmarks/profile_noise.py [--pairs 20] [--steps 12] [--captures 3] [--load 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

PLANTED = ("blocks.1", "aten::matmul")
HIDDEN = 512


def _spin() -> None:
    while True:
        pass


def _models(planted_rows: int):
    import torch

    class Mlp(torch.nn.Module):
        def __init__(self, planted: bool) -> None:
            super().__init__()
            self.fc1 = torch.nn.Linear(64, HIDDEN)
            self.fc2 = torch.nn.Linear(HIDDEN, 64)
            self.planted = planted
            self.w = torch.nn.Parameter(torch.randn(HIDDEN, HIDDEN) / HIDDEN**0.5)

        def forward(self, x):
            h = torch.nn.functional.gelu(self.fc1(x))
            if self.planted:
                torch.matmul(h[:planted_rows], self.w)  # the extra op: its result is not even used
            return self.fc2(h)

    class Net(torch.nn.Module):
        def __init__(self, planted: bool) -> None:
            super().__init__()
            self.embed = torch.nn.Linear(32, 64)
            self.blocks = torch.nn.ModuleList([Mlp(False), Mlp(planted)])
            self.norm = torch.nn.LayerNorm(64)

        def forward(self, x):
            x = self.embed(x)
            for block in self.blocks:
                x = x + block(x)
            return self.norm(x)

    torch.manual_seed(0)
    base, planted = Net(False), Net(True)
    planted.load_state_dict(base.state_dict())
    return base, planted


def _capture(model, x, path: Path, steps: int) -> Path:
    import torch

    from accelport.verify.perf import profile

    def step():
        with torch.no_grad():
            model(x)

    return profile.capture(step, path, steps=steps, warmup=2, model=model)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, default=20, help="planted pairs, and as many identical pairs")
    parser.add_argument("--steps", type=int, default=12, help="profiled steps per trace")
    parser.add_argument("--captures", type=int, default=3,
                        help="captures per side, one after the other (1: a pair of single traces)")
    parser.add_argument("--load", type=int, default=0, help="busy-loop processes to run alongside")
    parser.add_argument("--planted-rows", type=int, default=32, help="rows of the planted matmul (1024 = as large as the block)")
    args = parser.parse_args(argv)

    import torch

    from accelport.verify.perf import profile

    torch.set_num_threads(1)
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.load)]
    for spinner in spinners:
        spinner.start()
    started = time.perf_counter()
    try:
        base_model, planted_model = _models(args.planted_rows)
        x = torch.randn(1024, 32)
        ranks, ranks_by_delta, false_rows, above, corrected = [], [], [], [], []
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            _capture(base_model, x, root / "warm.json", 2)
            for pair in range(args.pairs):
                for kind, other in (("planted", planted_model), ("identical", base_model)):
                    base = [_capture(base_model, x, root / f"{pair}-{kind}-base-{c}.json", args.steps)
                            for c in range(args.captures)]
                    test = [_capture(other, x, root / f"{pair}-{kind}-test-{c}.json", args.steps)
                            for c in range(args.captures)]
                    result = profile.diff_traces(base, test)
                    if kind == "planted":
                        keys = [(r.module, r.op) for r in result.rows]
                        by_delta = [(r.module, r.op) for r in sorted(result.rows, key=lambda r: -r.delta)]
                        ranks.append(keys.index(PLANTED) + 1)
                        if ranks[-1] != 1:
                            above.append([{"row": f"{r.module} {r.op}".strip(), "significance": r.significance,
                                           "why": list(r.why), "delta_us": r.delta}
                                          for r in result.rows[: ranks[-1]]])
                        ranks_by_delta.append(by_delta.index(PLANTED) + 1)
                    else:
                        tested = [r.p_value for r in result.rows
                                  if r.p_value is not None and r.significance != profile.STRUCTURAL]
                        if tested:
                            corrected.append(min(tested) * len(tested))
                        false_rows.append([
                            {"row": f"{r.module} {r.op}".strip(), "significance": r.significance, "p": r.p_value,
                             "ratio": r.ratio, "delta_share_of_step": r.delta / result.base.total}
                            for r in result.rows if r.significance in (profile.SIGNIFICANT, profile.STRUCTURAL)])
    finally:
        for spinner in spinners:
            spinner.terminate()
    figures = {
        "benchmark": "profile_noise",
        "pairs": args.pairs,
        "steps_per_trace": args.steps,
        "captures_per_side": args.captures,
        "load_processes": args.load,
        "planted_rows": args.planted_rows,
        "planted_first": sum(1 for r in ranks if r == 1),
        "planted_ranks": ranks,
        "rows_above_the_planted_op": above,
        "comparison_planted_first_by_delta_alone": sum(1 for r in ranks_by_delta if r == 1),
        "comparison_planted_ranks_by_delta_alone": ranks_by_delta,
        "identical_pairs_with_a_significant_row": sum(1 for rows in false_rows if rows),
        "identical_pairs_false_rows": [rows for rows in false_rows if rows],
        # How close the identical pairs came: each pair's smallest p-value times the rows tested
        # (a significant row needs this below the family-wise alpha).
        "identical_pairs_smallest_corrected_p": sorted(round(p, 4) for p in corrected)[:5],
        "family_alpha": profile.FAMILY_ALPHA,
        "wall_s": round(time.perf_counter() - started, 1),
        "target": "planted first in every planted pair; no significant row in any identical pair",
    }
    figures["pass"] = figures["planted_first"] == args.pairs and figures["identical_pairs_with_a_significant_row"] == 0
    print(json.dumps(figures, indent=2))
    return 0 if figures["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
