"""`train.log_every`: progress lines inside an epoch (a full-size epoch runs for hours)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from sciperf.run.progress import StepLines


@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_log_every_prints_step_lines(framework, sciperf_cmd, tiny_mini_data, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"}
    proc = subprocess.run(
        [*sciperf_cmd, "train", "experiment=mini", f"framework={framework}",
         f"data.dir={tiny_mini_data}", f"output_dir={tmp_path / 'run'}",
         "data.train_samples=64", "data.eval_samples=32", "train.global_batch_size=16",
         "train.max_epochs=1", "train.target=0.0001", "train.log_every=2"],
        capture_output=True, text=True, timeout=600, check=False, env=env)
    assert proc.returncode == 1, proc.stderr[-2000:]  # one epoch, target not reached
    steps = re.findall(r"^epoch +1/1 step (\d+)/4 loss \d+\.\d{4} \| [\d.]+ samples/s, "
                       r"epoch ETA ", proc.stdout, re.M)
    assert steps == ["2", "4"], proc.stdout


def test_step_lines_count_from_a_resumed_epochs_steps(capsys):
    lines = StepLines(every=3, epoch=2, max_epochs=5, total=10, done_steps=4, world=2)
    for loss in (1.0, 3.0, 5.0):
        lines(8, loss)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("epoch   2/5 step 6/10 loss 2.0000 | ")
    lines(8, 7.0)
    assert capsys.readouterr().out == ""  # step 8: not a multiple of 3
    lines(8, 9.0)
    assert "step 9/10 loss 7.0000" in capsys.readouterr().out  # steps 7-9
    StepLines(every=1, epoch=1, max_epochs=1, total=None, done_steps=0, world=1)(4, 0.5)
    assert re.match(r"epoch   1/1 step 1 loss 0\.5000 \| [\d.]+ samples/s$",
                    capsys.readouterr().out.strip())
