"""OpenFold: partial AlphaFold2 "initial training" from a fixed checkpoint; the metric is the
mean lDDT-Cα over the validation chains (higher is better, target 0.8).

``WORKLOAD`` is its contract (``sciperf.workloads.base.Workload``). Framework-free parts
live here: every number (``spec``; the network's sizes and parameter table in ``sizes``),
the residue constants as data (``residue_constants``) and the structure geometry
(``geometry``), the lDDT-Cα metric (``lddt``), the reference's processed data layout
(``layout``: chains.csv, dicts, alignment shards), mmCIF (``mmcif``), a3m/hhr
(``parsers``), the feature pipeline (``features``) with templates realigned by kalign
(``templates``), the training sampler (``sampler``), learnable synthetic proteins
(``synthetic``), the contract glue (``data``). The network is in each framework's
``workloads/openfold``. Facts: shared/spec/openfold.md.

Training draws chains with replacement (a ``SampledPlan``: every rank draws from every
chain through ``data.draw``); an epoch is one train/validation cycle of ``val_every_iters``
steps and MLLOG's ``epoch_num`` counts samples (``spec.mllog_epoch``). Validation evaluates
one whole chain per batch.
"""

from __future__ import annotations

from sciperf.data.plan import SampledPlan
from sciperf.workloads.base import Cost, Dataset, Metric, Workload
from sciperf.workloads.openfold import bench, data, flops, prepare, sources, spec

WORKLOAD = Workload(
    name=spec.NAME,
    metric=Metric(spec.METRIC_KEY, spec.METRIC_NAME, spec.TARGET, spec.HIGHER_IS_BETTER,
                  (0.0, 1.0)),
    model=spec.ModelSpec, optimizer=spec.OptimizerSpec, train=spec.TrainSpec,
    data=spec.DataSpec,
    dataset=Dataset(formats=data.FORMATS, splits=spec.SPLITS,
                    list_samples=data.list_samples, sample_files=data.sample_files,
                    reader=data.model_reader, prepare=prepare.SOURCES, sources=sources.SOURCES,
                    payload_bytes=data.payload_bytes, collate=data.collate),
    # chains drawn with replacement by the reference's sampler; an epoch is one
    # train/validation cycle; validation evaluates one whole chain per batch
    plan=SampledPlan(spec.steps_per_epoch, data.draw, spec.EPOCH_KEY,
                     epoch_num=spec.mllog_epoch, eval_batch=1),
    lr_for_step=spec.lr_at_step, per_step_lr=True,
    mllog_hyperparameters=spec.mllog_hyperparameters,
    train_samples=spec.TRAIN_SAMPLES, eval_samples=spec.EVAL_SAMPLES,
    runs_for_score=spec.RUNS_FOR_SCORE, rcp_epochs=spec.RCP_EPOCHS,
    full_parameter_count=spec.FULL_PARAMETER_COUNT,
    check_config=spec.check_config, check_run=spec.check_run,
    cost=Cost(flops.layers, passes=flops.FLOPS_PASSES, efficiency=flops.EFFICIENCY),
    bench=bench.CASES,
)
