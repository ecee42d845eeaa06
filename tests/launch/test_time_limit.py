"""`time_limit` is what `#SBATCH --time=` gets: only the formats Slurm accepts.

sbatch(1): "minutes", "minutes:seconds", "hours:minutes:seconds", "days-hours",
"days-hours:minutes" and "days-hours:minutes:seconds" (0: no limit). Anything else used to
be written into the script as is (`#SBATCH --time=abc`) and only failed at submission.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sciperf.config import compose
from sciperf.errors import SciperfError

pytest.importorskip("sciperf_launchers")
from sciperf_launchers import plan  # noqa: E402

SLURM = ["workload=cosmoflow", "system=slurm-gpu-node", "launcher=srun",
         "output_dir=/scratch/sciperf/out", "data.dir=/scratch/sciperf/data"]
GOOD = ["0", "90", "30:00", "01:00:00", "48:00:00", "2-12", "2-12:30", "2-12:30:15", "UNLIMITED",
        "infinite"]
BAD = ["abc", "1h", "1.5", "-5", "1-", "-1:00", "1:2:3:4", "1-2-3", "1-2:3:4:5", ":30",
       "01:00:00x", "' 90'", "2 -12", "UNLIMITEDX"]


@pytest.mark.parametrize("value", GOOD)
def test_slurm_formats_are_rendered(value: str) -> None:
    overrides = [*SLURM, f"time_limit={value}"]
    text = plan(compose(overrides), overrides=overrides).text
    assert f"\n#SBATCH --time={value}\n" in text


@pytest.mark.parametrize("value", BAD)
def test_other_values_are_refused_at_composition(value: str) -> None:
    with pytest.raises(SciperfError) as info:
        compose([*SLURM, f"time_limit={value}"])
    message = str(info.value)
    assert "\n" not in message and message.startswith("time_limit="), message
    assert "D-HH:MM:SS" in message, message


def test_a_config_built_in_code_is_checked_when_rendered() -> None:
    cfg = compose(SLURM)
    OmegaConf.update(cfg, "time_limit", "abc")
    with pytest.raises(SciperfError, match=r"^time_limit=abc is not a Slurm time"):
        plan(cfg)


def test_launch_refuses_before_writing(sciperf_cmd: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k != "SCIPERF_DEBUG"}
    proc = subprocess.run([*sciperf_cmd, "launch", "workload=cosmoflow", "system=slurm-gpu-node",
                           "launcher=srun", "time_limit=abc", "dry_run=true", f"output_dir={out}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          check=False, env=env)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr
    assert proc.stderr.startswith("sciperf launch: error: time_limit=abc ")
    assert not out.exists()
