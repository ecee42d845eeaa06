"""`sciperf bench` refuses, in one line and before any row runs, what used to time
something other than what was asked (a key the bench sets itself, sizes that do not
divide), be ignored (`output_dir=`, a typo with `bench.cases=input`), or fail after minutes
(an output folder that is a file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sciperf.errors import SciperfError
from sciperf.tools import bench
from sciperf.tools.bench import input_rows, training


@pytest.fixture
def no_rows(monkeypatch, tmp_path: Path) -> Path:
    """Any row, or the precision probe before them, fails the test: a refusal must come
    first. The working folder is an empty one, to see that nothing lands in it."""
    def never(*_a, **_k):
        raise AssertionError("a row ran before the options were checked")

    # each where the run looks it up (a loader row: in input_rows)
    for module, name in ((bench, "train_case"), (bench, "isolated_train_case"),
                         (input_rows, "input_case"), (bench, "staging_case"),
                         (bench, "scaling_case"), (bench, "_auto_choice")):
        monkeypatch.setattr(module, name, never)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return cwd


@pytest.mark.parametrize(("args", "message"), [
    (["output_dir=x"], r"^output_dir=x: the bench's folder is output= \(default bench\)$"),
    (["output="], r"^output= is empty: name the bench's folder"),
    (["precision=fp32"], r"^precision=fp32: the bench sets precision for each row itself; "
                         r"use bench.precision=$"),
    (["bench.precision=bf16", "precision=fp32"], r"^precision=fp32: .* use bench.precision="),
    (["+precision=foo"], r"^\+precision=foo: .* use bench.precision="),
    (["experiment=full"], r"^experiment=full: .* use bench.cases="),
    (["train.global_batch_size=4"], r"use bench.batch=$"),
    (["data.train_samples=4"], r"use bench.samples=$"),
    (["data.eval_samples=4"], r"use bench.samples="),
    (["data.dir=/x"], r"use output="),
    (["data.format=tfrecord"], r"use bench.cases=input"),
    (["bench.sampels=4"], r"^bench.sampels=4: not a bench option \(they are bench.cases, "),
    (["bench.cases=input", "bench.sampels=4"], r"^bench.sampels=4: not a bench option"),
    (["train.foo=3"], r"^unknown key train.foo"),
    (["bench.cases=input", "train.foo=3"], r"^unknown key train.foo"),
    (["bench.cases=input", "no_such_key=1"], r"no_such_key"),
    (["bench.cases=input", "framework.threads=2"],
     r"^framework.threads=2: bench.cases=input times no training row"),
    (["framework=nope"], r"framework/nope"),
    (["bench.rounds=0"], r"^bench.rounds=0: expected a positive integer$"),
    (["bench.rounds=two"], r"^bench.rounds=two: expected a positive integer$"),
    (["bench.cases=input", "bench.rounds=3"],
     r"^bench.rounds=3: bench.cases=input times no training row, and rounds repeat"),
    (["bench.cases="], r"^bench.cases=: an empty name; name one or more of mini, full, input$"),
    (["bench.cases=,"], r"^bench.cases=,: an empty name"),
    (["bench.cases=mini,,full"], r"an empty name"),
    (["bench.precision="], r"^bench.precision=: an empty name"),
    (["bench.workers=1,1"], r"^bench.workers=1,1: 1 is named twice$"),
    (["bench.precision=bf16,bf16"], r"^bench.precision=bf16,bf16: bf16 is named twice$"),
    (["framework=pytorch,pytorch"], r"^framework=pytorch,pytorch: pytorch is named twice$"),
    (["bench.cases=mini,mini"], r"mini is named twice"),
    (["bench.cases=mini", "bench.cases=full"], r"^bench.cases is given twice"),
    (["bench.samples=20", "bench.batch=8"],
     r"^bench.samples=20, bench.batch=8: 20 samples do not divide into batches of 8"),
    # CosmoFlow's validation loader takes whole batches too: half of 24 is 12
    (["bench.samples=24", "bench.batch=8"], r"12 validation samples .* multiple of 16"),
    (["bench.batch=5", "bench.cases=mini"],
     r"^the mini case's samples=64, bench.batch=5: 64 samples do not divide"),
    (["workload=oc20", "bench.samples=2", "bench.batch=4"],
     r"^bench.samples=2, bench.batch=4: the batch is larger than the samples"),
    (["workload=openfold", "bench.cases=full", "bench.batch=2"],
     r"samples=1, bench.batch=2: the batch is larger"),
])
def test_refused_in_one_line_before_any_row(args: list[str], message: str,
                                           no_rows: Path) -> None:
    with pytest.raises(SciperfError, match=message) as err:
        bench.bench(["workload=cosmoflow", *args] if not any(
            a.startswith("workload=") for a in args) else args)
    assert "\n" not in str(err.value)
    assert not list(no_rows.iterdir())  # nothing written into the working folder


@pytest.mark.parametrize("kind", ["file", "under a file"])
def test_an_output_that_cannot_be_a_folder_is_refused_first(kind: str, no_rows: Path) -> None:
    """`output=/path/to/a/file` was a 26-line child traceback after the precision probe."""
    afile = no_rows.parent / "afile"
    afile.write_text("x")
    out = afile if kind == "file" else afile / "sub"
    with pytest.raises(SciperfError, match=f"^output={out} "):
        bench.bench(["workload=cosmoflow", "bench.cases=mini", f"output={out}"])
    assert afile.read_text() == "x"


def test_sizes_the_cases_take_are_accepted(no_rows: Path) -> None:
    """What scripts/gpu-check.sh asks (32 samples in batches of 8) and each workload's own
    case sizes pass; the plan records what was asked."""
    from sciperf.workloads import WORKLOADS

    for name in WORKLOADS:
        plan = bench.plan_bench([f"workload={name}", f"output={no_rows / 'b'}"])
        assert plan.asked()["cases"][:3] == ["mini", "full", "input"]
    plan = bench.plan_bench(["workload=cosmoflow", "bench.cases=full", "bench.samples=32",
                             "bench.batch=8", "bench.epochs=2", "bench.precision=bf16",
                             "bench.rounds=3", "framework.compile=true",
                             f"output={no_rows / 'b'}"])
    assert plan.asked() == {"cases": ["full"], "frameworks": ["pytorch"],
                            "precisions": ["bf16"], "samples": 32, "batch": 8, "epochs": 2,
                            "workers": plan.workers, "isolate": True, "rounds": 3,
                            "overrides": ["workload=cosmoflow", "framework.compile=true"]}
    json.dumps(plan.asked())  # as the JSON records it


def test_a_train_row_of_zero_samples_is_never_written(tmp_path: Path, monkeypatch) -> None:
    """A backend that timed nothing (a row of zeros was written, exit 0) is one line."""
    from sciperf.backends import EpochResult

    pytest.importorskip("torch")
    real = training.load_backend

    def idle(*args, **kwargs):
        backend = real(*args, **kwargs)
        backend.train_epoch = lambda epoch, lr: EpochResult(0, 0.0, 0.01)
        return backend

    monkeypatch.setattr(training, "load_backend", idle)
    with pytest.raises(SciperfError, match="bench row pytorch mini fp32: no training "
                                           "samples were timed"):
        bench.train_case("pytorch", "mini", "fp32", tmp_path, ["workload=cosmoflow"],
                         {"samples": 16, "batch": 8, "epochs": 1})


def test_loader_rows_record_the_workers_that_can_be_busy() -> None:
    """The loader keeps batch × (prefetch + 1) reads in flight, never more than the
    samples: a row asked for 16 workers over 8 samples timed 8."""
    assert bench.usable_workers(16, 8, 4) == 8
    assert bench.usable_workers(16, 64, 4) == 16
    assert bench.usable_workers(32, 64, 4) == 20
    assert bench.usable_workers(2, 64, 4) == 2


def test_the_scaling_rows_take_the_overrides_but_their_own_keys() -> None:
    """The 1-vs-2-rank rows are training too: a bench override (`framework.malloc=…`)
    times them as it times the training rows (they ran the default config); the thread
    layout, epochs, target and launcher are the row's own, and an override of them is
    recorded as replaced rather than dropped in silence. `workload=` is how the bench
    picked the rows' workload: neither."""
    taken, replaced = bench.scaling_overrides(
        ["workload=cosmoflow", "framework.malloc=arena", "opt.warmup_epochs=0",
         "framework.threads=1", "+launcher.nprocs=4", "launcher=srun", "train.target=0.3"])
    assert taken == ["framework.malloc=arena", "opt.warmup_epochs=0"]
    assert replaced == ["framework.threads=1", "+launcher.nprocs=4", "launcher=srun",
                        "train.target=0.3"]
