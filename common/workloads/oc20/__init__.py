"""OpenCatalyst OC20: DimeNet++ predicts energies and forces of catalyst structures (S2EF);
the metric is the validation force MAE (eV/Å), lower is better.

``WORKLOAD`` is its contract (``sciperf.workloads.base.Workload``): every number is in
``spec``, the basis functions' numpy reference in ``basis``, periodic neighbour lists in
``graph``, the two formats (the reference's LMDB of pickled graphs, read without running
code; sciperf's packed npy shards) and the graph batching in ``data``, the EMT slabs in
``synthetic``. Samples vary in size, so ``collate`` concatenates graphs rather than
stacking; sharding is ``uneven`` (every rank steps together on ⌊n/ranks⌋ structures;
every validation structure is evaluated once).
"""

from __future__ import annotations

from sciperf.data.plan import UnevenPlan
from sciperf.workloads.base import Cost, Dataset, Metric, Workload
from sciperf.workloads.oc20 import bench, data, flops, prepare, sources, spec

WORKLOAD = Workload(
    name=spec.NAME,
    metric=Metric(spec.METRIC_KEY, spec.METRIC_NAME, spec.TARGET, spec.HIGHER_IS_BETTER),
    model=spec.ModelSpec, optimizer=spec.OptimizerSpec, train=spec.TrainSpec,
    data=spec.DataSpec,
    dataset=Dataset(formats=data.FORMATS, splits=spec.SPLITS,
                    list_samples=data.list_samples, sample_files=data.sample_files,
                    reader=data.model_reader, prepare=prepare.SOURCES, sources=sources.SOURCES,
                    conversion=prepare.CONVERSION,
                    pack=data.pack,
                    payload_bytes=data.payload_bytes, collate=data.collate),
    plan=UnevenPlan(spec.steps_per_epoch),
    lr_for_step=spec.lr_at_step, per_step_lr=True,
    mllog_hyperparameters=spec.mllog_hyperparameters,
    train_samples=spec.TRAIN_SAMPLES, eval_samples=spec.EVAL_SAMPLES,
    runs_for_score=spec.RUNS_FOR_SCORE, rcp_epochs=spec.RCP_EPOCHS,
    full_parameter_count=spec.FULL_PARAMETER_COUNT,
    check_config=spec.check_config, check_run=spec.check_run,
    cost=Cost(flops.layers, passes=spec.FLOPS_PASSES, on_data=flops.cost_on_data,
              efficiency=flops.EFFICIENCY),
    bench=bench.CASES,
)
