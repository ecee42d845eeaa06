"""GPT-2 small language modelling on OpenWebText; the metric is the mean validation
cross-entropy in nats/token (lower is better, target 3.10).

``WORKLOAD`` is its contract (``sciperf.workloads.base.Workload``). Every number is in
``spec``, the token files in ``tokens``, the samples (windows), the sampler, the data plan
and the target rule in ``data``, the BPE in ``tokenizer``, the synthetic Markov stream in
``synthetic``, the released checkpoint's layouts in ``checkpoint``, the sources and the
conversion in ``sources`` and ``prepare``, the counted layers in ``flops``, the bench's
cases in ``bench``. The network is in each framework's ``workloads/gpt2``.

Training draws windows with replacement (a ``SampledPlan`` that counts a step's
accumulated forwards, ``data.TokenPlan``); an epoch is one train/validation cycle of
``train.eval_every_steps`` optimizer steps; validation scores the fixed grid of windows of
``val.bin``. A synthetic set's run may aim at its recorded entropy rate plus a margin
(``Workload.run_target``: ``data.run_target``). Not an MLPerf HPC benchmark: open division.
"""

from __future__ import annotations

from sciperf.workloads.base import Cost, Dataset, Metric, Workload
from sciperf.workloads.gpt2 import bench, data, flops, prepare, sources, spec

WORKLOAD = Workload(
    name=spec.NAME,
    # cross-entropy in nats: 0 for a perfect model; no upper bound
    metric=Metric(spec.METRIC_KEY, spec.METRIC_NAME, spec.TARGET, spec.HIGHER_IS_BETTER),
    model=spec.ModelSpec, optimizer=spec.OptimizerSpec, train=spec.TrainSpec,
    data=spec.DataSpec,
    dataset=Dataset(formats=data.FORMATS, splits=spec.SPLITS,
                    list_samples=data.list_samples, sample_files=data.sample_files,
                    reader=data.model_reader, prepare=prepare.SOURCES, sources=sources.SOURCES,
                    conversion=prepare.CONVERSION, payload_bytes=data.payload_bytes),
    plan=data.PLAN,
    lr_for_step=spec.lr_for_step, per_step_lr=True,
    mllog_hyperparameters=data.mllog_hyperparameters,
    train_samples=(spec.TRAIN_TOKENS - 1) // spec.CONTEXT,
    eval_samples=(spec.EVAL_TOKENS - 1) // data.EVAL_STRIDE,
    runs_for_score=spec.RUNS_FOR_SCORE, rcp_epochs=spec.RCP_EPOCHS,
    full_parameter_count=spec.FULL_PARAMETER_COUNT,
    check_config=spec.check_config, check_run=data.check_run,
    cost=Cost(flops.layers),
    bench=bench.CASES,
    run_target=data.run_target,
)
