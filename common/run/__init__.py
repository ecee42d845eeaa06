"""Running one training instance (``sciperf train``), split by job:

* ``driver``   — `train()`: the run's phases in order, the epoch loop
* ``files``    — the files a run writes and reads: names, dataset plan, staging, init files
* ``checks``   — what is settled before training: precision, memory, same config on all ranks
* ``resume``   — resuming from a checkpoint and writing checkpoints
* ``signals``  — ending on a signal or a hang with the records written; stop on request
* ``summary``  — summary.json and the one line about an ended run's records
* ``progress`` — the step and epoch lines, the finite check
* ``state``    — `RunState`, what the run accumulates

The names other packages use are re-exported here: ``from sciperf.run import train``.
"""

from sciperf.run.driver import train
from sciperf.run.files import require_dataset, resolve_files, result_file, summary_file
from sciperf.run.summary import json_safe

__all__ = ["json_safe", "require_dataset", "resolve_files", "result_file", "summary_file",
           "train"]
