"""TensorFlow's C++ INFO lines stay out of a run's stderr; its warnings, errors and a user's
own TF_CPP_MIN_LOG_LEVEL do not."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("tensorflow")

CHILD = (
    "import os, sciperf_tensorflow.backend, tensorflow as tf; "
    "tf.reduce_sum(tf.ones([3])).numpy(); "
    "print(os.environ['TF_CPP_MIN_LOG_LEVEL'])"
)
INFO_LINE = re.compile(r"^I\d{4} |cpu_feature_guard|absl::InitializeLog", re.M)


def run_child(level: str | None) -> subprocess.CompletedProcess:
    """A fresh interpreter imports the backend (and with it TensorFlow) and runs one op."""
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    if level is not None:
        env["TF_CPP_MIN_LOG_LEVEL"] = level
    return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, timeout=300, check=True)


def test_info_lines_are_dropped_and_warnings_kept() -> None:
    done = run_child(None)
    assert done.stdout.strip() == "1"  # INFO off, WARNING and ERROR still print
    assert not INFO_LINE.search(done.stderr), done.stderr


def test_a_level_the_user_exported_wins() -> None:
    assert run_child("0").stdout.strip() == "0"
