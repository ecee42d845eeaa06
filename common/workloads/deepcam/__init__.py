"""DeepCAM: DeepLabv3+ segments 768×1152×16 climate fields into background, tropical
cyclones and atmospheric rivers.

``WORKLOAD`` is its contract (``sciperf.workloads.base.Workload``); every number is in
``spec``, the formats and stats.h5 in ``data``, the synthetic climate in ``synthetic``.
The reference shards unevenly (neither sample count divides by usual scales): each rank
trains on ⌊n/ranks⌋ samples in full batches only, and validation shards differ by one.
"""

from __future__ import annotations

from sciperf.data.plan import UnevenPlan
from sciperf.workloads.base import Cost, Dataset, Metric, Workload
from sciperf.workloads.deepcam import bench, dali, data, flops, prepare, sources, spec

WORKLOAD = Workload(
    name=spec.NAME,
    metric=Metric(spec.METRIC_KEY, spec.METRIC_NAME, spec.TARGET, spec.HIGHER_IS_BETTER,
                  (0.0, 1.0)),
    model=spec.ModelSpec, optimizer=spec.OptimizerSpec, train=spec.TrainSpec,
    data=spec.DataSpec,
    dataset=Dataset(formats=spec.DATA_FORMATS, splits=spec.SPLITS,
                    list_samples=data.list_samples, sample_files=data.sample_files,
                    reader=data.model_reader, prepare=prepare.SOURCES, sources=sources.SOURCES,
                    conversion=prepare.CONVERSION,
                    payload_bytes=data.payload_bytes),
    plan=UnevenPlan(spec.steps_per_epoch),
    lr_for_step=spec.lr_at_step, per_step_lr=True,
    mllog_hyperparameters=spec.mllog_hyperparameters,
    train_samples=spec.TRAIN_SAMPLES, eval_samples=spec.EVAL_SAMPLES,
    runs_for_score=spec.RUNS_FOR_SCORE, rcp_epochs=spec.RCP_EPOCHS,
    full_parameter_count=spec.FULL_PARAMETER_COUNT,
    check_config=spec.check_config, check_run=spec.check_run,
    cost=Cost(flops.layers, hot_op="conv2d", efficiency=flops.EFFICIENCY),
    bench=bench.CASES, dali=dali.FORMAT,
)
