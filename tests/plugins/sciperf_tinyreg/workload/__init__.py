"""tinyreg's contract: the same Workload a workload of the tree builds."""

from __future__ import annotations

from sciperf.data.plan import StrictPlan
from sciperf.workloads.base import Cost, Dataset, Layer, Metric, Workload

from . import data, spec


def layers(model: spec.ModelSpec) -> list[Layer]:
    """The one counted layer: inputs multiply-adds, inputs + 1 parameters, one output."""
    return [Layer(spec.LAYER, "dense", int(model.inputs), model.parameter_count(), 1)]


WORKLOAD = Workload(
    name=spec.NAME,
    metric=Metric(spec.METRIC_KEY, spec.METRIC_NAME, spec.TARGET, False),
    model=spec.ModelSpec, optimizer=spec.OptimizerSpec, train=spec.TrainSpec,
    data=spec.DataSpec,
    dataset=Dataset(formats=data.FORMATS, splits=data.SPLITS,
                    list_samples=data.list_samples, sample_files=data.sample_files,
                    reader=data.reader, prepare=data.SOURCES,
                    payload_bytes=data.payload_bytes),
    plan=StrictPlan(spec.steps_per_epoch),
    lr_for_step=spec.lr_for_step, per_step_lr=False,
    mllog_hyperparameters=spec.mllog_hyperparameters,
    train_samples=spec.TRAIN_SAMPLES, eval_samples=spec.EVAL_SAMPLES,
    runs_for_score=spec.RUNS_FOR_SCORE, rcp_epochs={16: 5.0},
    full_parameter_count=spec.ModelSpec().parameter_count(),
    cost=Cost(layers),
    check_config=spec.check_config, check_run=spec.check_run,
)
