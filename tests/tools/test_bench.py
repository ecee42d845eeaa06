"""`sciperf bench` is driven by the workload contract: every registered workload's bench
cases run through the real backend and the common loader (mini sizes only here; the full
rows are what `make bench` is for)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sciperf.config import compose
from sciperf.errors import SciperfError
from sciperf.info import machine
from sciperf.tools import bench
from sciperf.tools.bench import training
from sciperf.tools.characterize import count_flops
from sciperf.workloads import WORKLOADS, get


@pytest.mark.parametrize("name", WORKLOADS)
def test_mini_train_case_runs_the_real_backend(name: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    w = get(name)
    row = bench.train_case("pytorch", "mini", "fp32", tmp_path, [f"workload={name}"])
    n, gbs, epochs, _ = w.bench.train["mini"]
    mini = w.model_spec(compose([f"workload={name}", "experiment=mini"]))
    assert row["parameters"] == mini.parameter_count()
    assert row["input_size"] == w.bench.size(mini)
    assert row["global_batch_size"] == gbs
    # full batches of every timed epoch (a sampled workload's epoch is set to n/gbs steps)
    assert row["samples"] == epochs * (n // gbs) * gbs
    assert row["samples_per_s"] > 0 and row["peak_flops"] > 0
    # one rate per timed epoch, whose samples-weighted harmonic mean is the row's rate
    rates = row["samples_per_s_by_epoch"]
    assert len(rates) == epochs and all(r > 0 for r in rates)
    assert row["samples_per_s"] == pytest.approx(
        row["samples"] / sum(row["samples"] / epochs / r for r in rates), rel=1e-2)
    from sciperf.info import machine
    assert row["device"].startswith(f"{machine()['cpu']} ({machine()['cores']} cores, ")
    # the model's counted training FLOPs (as `characterize` counts them) against the peak
    assert row["train_flops_per_sample"] > 0
    if w.cost.on_data is None:  # fixed sizes: the spec's count (graphs: counted on the data)
        assert row["train_flops_per_sample"] == count_flops(mini).train
    assert row["fraction_of_peak"] == pytest.approx(
        row["samples_per_s"] * row["train_flops_per_sample"] / row["peak_flops"], rel=5e-3)
    per_unit = {k for k in row if k.endswith("_per_s")} - {"samples_per_s"}
    if w.cost.on_data is None:  # fixed-size samples: samples/s says it all
        assert not per_unit
    else:  # graphs: one rate per varying size, at samples/s × the mean size
        assert per_unit
        for key in per_unit:
            mean = row[key.replace("_per_s", "_per_sample")]
            assert row[key] == pytest.approx(row["samples_per_s"] * mean, rel=1e-2)


@pytest.mark.parametrize("name", WORKLOADS)
def test_input_rows_cover_every_format(name: str, tmp_path: Path) -> None:
    w = get(name)
    sizes, n = w.bench.input[0]
    for fmt in w.formats:
        row = bench.input_case(w, dict(sizes), fmt, tmp_path, n)
        assert row["format"] == fmt and row["samples"] == n
        assert row["workers"] == 2 and row["device"] == bench._device("cpu")
        assert row["input_size"] == w.bench.size(w.model(**sizes))
        assert row["samples_per_s"] > 0 and row["MB_per_s"] > 0


def test_a_workload_without_cases_is_one_line() -> None:
    from dataclasses import replace

    bare = replace(get(WORKLOADS[0]), bench=None)
    with pytest.raises(SciperfError, match=f"no cases for workload={bare.name}"):
        bench._cases(bare)


def test_bench_cases_selects_rows_and_names_an_unknown_one() -> None:
    """`bench.cases=` picks rows (a user comparing machines wants only the full model);
    a case the workload lacks is one line listing what exists."""
    with pytest.raises(SciperfError, match=r"bench.cases=huge: huge is not one of mini, full, "
                                           r"input"):
        bench.bench([f"workload={WORKLOADS[0]}", "bench.cases=huge"])


@pytest.mark.parametrize("cold", [False, True])
def test_a_cold_case_times_its_first_epoch(cold: bool, tmp_path: Path, monkeypatch) -> None:
    """TrainCase.warm_up=False (OpenFold full: a step is minutes): no warm-up epoch runs,
    the first epoch is the timed one and the row says so; other cases warm up once,
    untimed."""
    from dataclasses import replace

    pytest.importorskip("torch")
    w = get("cosmoflow")
    cases = replace(w.bench, train={**w.bench.train,
                                    "mini": w.bench.train["mini"]._replace(warm_up=not cold)})
    monkeypatch.setattr(training, "get", lambda name: replace(w, bench=cases))
    epochs: list[int] = []
    real = training.load_backend

    def counting(*args, **kwargs):
        backend = real(*args, **kwargs)
        train_epoch = backend.train_epoch
        backend.train_epoch = lambda epoch, lr: (epochs.append(epoch), train_epoch(epoch, lr))[1]
        return backend

    monkeypatch.setattr(training, "load_backend", counting)
    row = bench.train_case("pytorch", "mini", "fp32", tmp_path, ["workload=cosmoflow"])
    timed = w.bench.train["mini"].epochs
    assert row["warm_up"] is not cold
    assert epochs == (list(range(timed)) if cold else list(range(timed + 1)))


def test_rows_land_as_they_finish_for_the_precisions_asked(tmp_path: Path,
                                                           monkeypatch) -> None:
    """bench.precision= picks the precisions; each row is in the JSON as soon as it is
    timed, so a run killed on a later row (the OOM killer on a full model) keeps the rows
    done — and the file is never half written."""
    import json

    timed: list[tuple[str, str]] = []

    def fake_row(fw, experiment, precision, root, extra, shape=None):
        if timed:  # the second row dies as an OOM kill would (no Python cleanup)
            raise SystemExit(137)
        timed.append((experiment, precision))
        return {"framework": fw, "model": experiment, "precision": precision,
                "samples_per_s": 0.000812, "seconds": 1231.5, "peak_rss_MB": 20000,
                "fraction_of_peak": 0.5}

    monkeypatch.setattr(bench, "train_case", fake_row)
    monkeypatch.setattr(bench, "machine", lambda: {**machine(), "bf16_kernels": True})
    with pytest.raises(SystemExit):
        bench.bench(["workload=cosmoflow", "bench.cases=mini,full", "bench.precision=bf16",
                     "bench.isolate=false",
                     f"output={tmp_path}"])
    # the rows done are in the partial file; no complete-looking cosmoflow.json was made
    partial = json.loads((tmp_path / "cosmoflow.json.partial").read_text())
    rows = partial["train"]
    assert [(r["model"], r["precision"]) for r in rows] == [("mini", "bf16")]
    assert rows[0]["samples_per_s"] == 0.000812
    assert partial["complete"] is False
    assert partial["asked"]["cases"] == ["mini", "full"]
    assert not (tmp_path / "cosmoflow.json").exists()
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary of a record (sciperf.data.atomic)
    with pytest.raises(SciperfError, match=r"bench.precision=fp16: fp16 is not one of fp32, "
                                           r"tf32, bf16"):
        bench.bench(["workload=cosmoflow", "bench.precision=fp16", f"output={tmp_path}"])


def test_small_rates_keep_their_digits() -> None:
    assert bench.significant(0.000812345) == 0.0008123
    assert bench.significant(7.38812) == 7.388


def test_loader_rows_scale_over_workers_up_to_the_cores() -> None:
    assert bench.worker_counts(1) == [1]
    assert bench.worker_counts(2) == [1, 2]
    assert bench.worker_counts(6) == [1, 2, 4, 6]
    assert bench.worker_counts(16) == [1, 2, 4, 8, 16]


def test_a_case_can_be_resized_for_a_faster_device(tmp_path: Path, monkeypatch) -> None:
    """bench.samples/batch/epochs replace the case's CPU-sized numbers (a GPU times two
    full steps in milliseconds), bench.workers picks the loader rows; bad values are one
    line naming the override."""
    import json

    shapes: list[dict[str, int] | None] = []
    real = bench.train_case
    monkeypatch.setattr(bench, "train_case", lambda *a: shapes.append(a[5]) or {
        "samples_per_s": 1.0, "seconds": 1.0, "peak_rss_MB": 1, "fraction_of_peak": 0.5})
    bench.bench(["workload=cosmoflow", "bench.cases=mini", "bench.precision=fp32",
                 "bench.isolate=false", "bench.samples=96", "bench.epochs=3", f"output={tmp_path}"])
    assert shapes == [{"samples": 96, "epochs": 3}]
    row = real("pytorch", "mini", "fp32", tmp_path,
                           ["workload=cosmoflow"], {"samples": 32, "batch": 8, "epochs": 1})
    assert (row["samples"], row["global_batch_size"]) == (32, 8)
    # the loader rows take bench.samples (8 of each size) and bench.epochs (timed passes
    # after one warm-up); 16 workers over 8 samples can have only 8 reads in flight: the
    # row of 8 is that loader already, so 16 is skipped rather than timed again as "16"
    bench.bench(["workload=cosmoflow", "bench.cases=input", "bench.workers=1,8,16",
                 "bench.samples=8", "bench.epochs=2", f"output={tmp_path}"])
    result = json.loads((tmp_path / "cosmoflow.json").read_text())
    loader_rows = [r for r in result["input"] if "workers" in r]
    assert [r["workers"] for r in loader_rows] == [1, 8] * 2 * len(get("cosmoflow").formats)
    assert all(r["samples"] == 16 and len(r["samples_per_s_by_pass"]) == 2
               for r in loader_rows)
    assert [r["warm_up"] for r in loader_rows[:2]] == [True, False]
    assert result["complete"] is True and result["asked"]["cases"] == ["input"]
    assert result["asked"]["workers"] == [1, 8, 16]
    assert not (tmp_path / "cosmoflow.json.partial").exists()
    # what precision=auto takes here, beside the rows of both precisions
    auto = result["precision_auto"]["pytorch"]
    assert auto["asked"] == "auto" and auto["precision"] in ("fp32", "bf16")
    assert set(auto["probe_ms"]) == {"fp32", "bf16"} and "conv3d" in auto["reason"]
    for bad in ("bench.batch=0", "bench.epochs=two", "bench.workers=1,x"):
        with pytest.raises(SciperfError, match=f"{bad}: expected a positive integer"):
            bench.bench(["workload=cosmoflow", bad, f"output={tmp_path}"])


def test_a_cpu_without_bf16_kernels_times_fp32_and_refuses_bf16_asked(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """Emulated bf16 (no AVX-512/AMX: ~25× fp32) is left out of the default bench with the
    reason in the JSON, and refused in one line before any row when bench.precision names
    it."""
    import json

    timed: list[tuple[str, str]] = []

    def fake_row(fw, experiment, precision, root, extra, shape=None):
        timed.append((experiment, precision))
        return {"framework": fw, "model": experiment, "precision": precision,
                "samples_per_s": 1.0, "seconds": 1.0, "peak_rss_MB": 1, "fraction_of_peak": 0.5}

    monkeypatch.setattr(bench, "train_case", fake_row)
    monkeypatch.setattr(bench, "machine", lambda: {**machine(), "cpu": "AVX2 CPU",
                                                   "bf16_kernels": False})
    bench.bench(["workload=cosmoflow", "bench.cases=mini", "bench.isolate=false",
                 f"output={tmp_path}"])
    result = json.loads((tmp_path / "cosmoflow.json").read_text())
    assert timed == [("mini", "fp32")] and result["asked"]["precisions"] == ["fp32"]
    assert "this CPU (AVX2 CPU) has no bf16 kernels" in result["bf16_left_out"]
    timed.clear()
    with pytest.raises(SciperfError, match=r"^bench.precision=fp32,bf16: this CPU \(AVX2 CPU\) "
                                           r"has no bf16 kernels .*use bench.precision=fp32"):
        bench.bench(["workload=cosmoflow", "bench.cases=mini", "bench.precision=fp32,bf16",
                     "bench.isolate=false", f"output={tmp_path}"])
    assert timed == []


def test_each_row_runs_in_a_process_of_its_own(tmp_path: Path) -> None:
    """By default a train row is timed in a spawned process: TensorFlow's thread pools are
    the row's own (here: the DeepCAM mini's small layers side by side, whatever pools this
    test process fixed before), and so are its allocator and peak memory; a row that
    fails is one line naming it; bench.isolate takes true or false only."""
    import json

    pytest.importorskip("tensorflow")
    import tensorflow as tf

    tf.constant(1.0) + 1  # this process's pools are fixed now
    bench.bench(["workload=deepcam", "framework=tensorflow", "bench.cases=mini",
                 "bench.precision=fp32", "bench.samples=16", "bench.epochs=1",
                 "framework.threads=2", f"output={tmp_path}"])
    row = json.loads((tmp_path / "deepcam.json").read_text())["train"][0]
    assert (row["threads"]["intra_op"], row["threads"]["inter_op"]) == (1, 2)
    assert row["malloc"] == "system" and row["samples_per_s"] > 0  # TensorFlow's default
    # a bad value is refused before any row; one the row finds (a missing weight file)
    # is its one line, naming the row and where the rows done are
    with pytest.raises(SciperfError, match=r"^model.aspp_rates=\[6\] needs 3 values"):
        bench.bench(["workload=deepcam", "framework=tensorflow", "bench.cases=mini",
                     "bench.precision=fp32", "model.aspp_rates=[6]", f"output={tmp_path}"])
    with pytest.raises(SciperfError, match="bench row tensorflow mini fp32: weight file "
                                           ".*does not exist.*deepcam.json is as it was"):
        bench.bench(["workload=deepcam", "framework=tensorflow", "bench.cases=mini",
                     "bench.precision=fp32", "bench.samples=16", "bench.epochs=1",
                     f"train.init_weights={tmp_path}/none.npz", f"output={tmp_path}"])
    with pytest.raises(SciperfError, match="bench.isolate=maybe: expected true or false"):
        bench.bench(["workload=cosmoflow", "bench.isolate=maybe", f"output={tmp_path}"])
    assert "SIGKILL (out of memory?" in bench._ended(-9)


def test_rounds_interleave_the_rows_and_compare_them_round_by_round(tmp_path: Path,
                                                                    monkeypatch) -> None:
    """bench.rounds=3 times every training row once per round, the rounds one after the
    other (not one row three times), and sums them up as medians and per-round ratios to
    the case's first row: on a VM whose speed drifts, the rows of one round share it."""
    import json

    order: list[tuple[str, str]] = []
    # round 2 runs on a machine twice as slow: the rates halve, the ratios do not move
    speed = {1: 1.0, 2: 0.5, 3: 1.0}
    base = {("pytorch", "fp32"): 1.0, ("pytorch", "bf16"): 2.5, ("tensorflow", "fp32"): 0.8,
            ("tensorflow", "bf16"): 2.0}

    def fake_row(fw, experiment, precision, root, extra, shape=None):
        order.append((fw, precision))
        n = 1 + (len(order) - 1) // 4
        return {"framework": fw, "model": experiment, "precision": precision,
                "samples_per_s": base[fw, precision] * speed[n], "seconds": 1.0,
                "peak_rss_MB": 1, "fraction_of_peak": 0.1}

    monkeypatch.setattr(bench, "train_case", fake_row)
    monkeypatch.setattr(bench, "machine", lambda: {**machine(), "bf16_kernels": True})
    monkeypatch.setattr(bench, "_auto_choice", lambda fw, w: {"precision": "bf16",
                                                              "reason": "test"})
    assert bench.bench(["workload=cosmoflow", "framework=pytorch,tensorflow",
                        "bench.cases=full", "bench.rounds=3", "bench.isolate=false",
                        f"output={tmp_path}"]) == 0
    one_round = [("pytorch", "fp32"), ("pytorch", "bf16"), ("tensorflow", "fp32"),
                 ("tensorflow", "bf16")]
    assert order == one_round * 3
    result = json.loads((tmp_path / "cosmoflow.json").read_text())
    assert [r["round"] for r in result["train"]] == [1] * 4 + [2] * 4 + [3] * 4
    assert result["asked"]["rounds"] == 3
    lines = {(r["framework"], r["precision"]): r for r in result["rounds"]}
    tf_bf16 = lines["tensorflow", "bf16"]
    assert tf_bf16["samples_per_s"] == [2.0, 1.0, 2.0]
    assert tf_bf16["median_samples_per_s"] == 2.0
    assert tf_bf16["spread"] == 2.0
    assert tf_bf16["vs"] == "pytorch full fp32"
    assert tf_bf16["ratio"] == [2.0, 2.0, 2.0]
    assert lines["tensorflow", "fp32"]["median_ratio"] == 0.8
    assert lines["pytorch", "fp32"]["ratio"] == [1.0, 1.0, 1.0]


def test_one_round_writes_no_summary(tmp_path: Path, monkeypatch) -> None:
    """Without bench.rounds the JSON is as before: each row once, round 1, no summary."""
    import json

    def fake_row(fw, experiment, precision, root, extra, shape=None):
        return {"framework": fw, "model": experiment, "precision": precision,
                "samples_per_s": 1.0, "seconds": 1.0, "peak_rss_MB": 1,
                "fraction_of_peak": 0.1}

    monkeypatch.setattr(bench, "train_case", fake_row)
    monkeypatch.setattr(bench, "machine", lambda: {**machine(), "bf16_kernels": True})
    monkeypatch.setattr(bench, "_auto_choice", lambda fw, w: {"precision": "bf16",
                                                              "reason": "test"})
    bench.bench(["workload=cosmoflow", "bench.cases=full", "bench.isolate=false",
                 f"output={tmp_path}"])
    result = json.loads((tmp_path / "cosmoflow.json").read_text())
    assert [r["round"] for r in result["train"]] == [1, 1]
    assert "rounds" not in result
