"""CosmoFlow: a 3-D CNN regresses 4 cosmological parameters from 128³×4 dark-matter cubes.

``WORKLOAD`` is its contract (``sciperf.workloads.base.Workload``); every number is in
``spec``, the formats in ``data``/``tfrecord``, the synthetic universes in ``synthetic``.
"""

from __future__ import annotations

from sciperf.data.plan import StrictPlan
from sciperf.workloads.base import Cost, Dataset, Metric, Workload
from sciperf.workloads.cosmoflow import bench, dali, data, flops, prepare, sources, spec

WORKLOAD = Workload(
    name=spec.NAME,
    metric=Metric(spec.METRIC_KEY, spec.METRIC_NAME, spec.TARGET, spec.HIGHER_IS_BETTER),
    model=spec.ModelSpec, optimizer=spec.OptimizerSpec, train=spec.TrainSpec,
    data=spec.DataSpec,
    dataset=Dataset(formats=spec.DATA_FORMATS, splits=spec.SPLITS,
                    list_samples=data.list_samples, sample_files=data.sample_files,
                    reader=data.make_reader, prepare=prepare.SOURCES, sources=sources.SOURCES,
                    conversion=prepare.CONVERSION,
                    payload_bytes=data.payload_bytes),
    plan=StrictPlan(spec.steps_per_epoch),
    lr_for_step=spec.lr_for_step, per_step_lr=False,
    mllog_hyperparameters=spec.mllog_hyperparameters,
    train_samples=spec.TRAIN_SAMPLES, eval_samples=spec.EVAL_SAMPLES,
    runs_for_score=spec.RUNS_FOR_SCORE, rcp_epochs=spec.RCP_EPOCHS,
    full_parameter_count=spec.FULL_PARAMETER_COUNT,
    check_config=spec.check_config,
    cost=Cost(flops.layers, hot_op="conv3d", efficiency=flops.EFFICIENCY),
    bench=bench.CASES, dali=dali.FORMAT,
)
