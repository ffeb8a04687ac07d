"""Test-wide settings (no network, deterministic torch) and the one tiny model every test package shares."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
# The CLI says once which thread count it chose when none is set; the suite sets one so that a command's stderr
# holds only what the test looks at (the choice itself is tested in tests/test_cli.py with the variables removed).
os.environ.setdefault("UGRPO_THREADS", "1")

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """One intra-op thread for the whole suite: the models here are tiny (threads gain nothing), CI has
    2 cores, and sampled tokens must not depend on how many threads reduced a matmul; restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tokenizer():
    """The character tokenizer of the built-in tiny models."""
    from ugrpo.lm.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


@pytest.fixture(scope="session")
def model(tokenizer):
    """A randomly initialised ~1 M-parameter tiny Qwen2 (seed 0), in memory, in eval mode."""
    from ugrpo.lm.tiny import build_tiny_model

    m = build_tiny_model(tokenizer, seed=0)
    m.eval()
    return m


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> str:
    """Folder of the same random tiny model (seed 0; no warm-up, no cache) with a 64-token context, saved with
    ``save_pretrained`` next to its tokenizer: what ``--model`` / ``model.name`` take."""
    from ugrpo.lm.tiny import build_tiny_model

    folder = tmp_path_factory.mktemp("tiny-random")
    build_tiny_model(tokenizer, seed=0, max_position_embeddings=64).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture
def small_disk(tmp_path):
    """A real disk that fills up: ``small_disk(n_bytes)`` mounts a tmpfs of that size at ``tmp_path / "disk"`` and
    returns the folder; calling it again resizes it (e.g. to free space). Unmounted after the test. Needs root and
    ``mount`` (the test is skipped otherwise; the injected-ENOSPC tests cover the same paths everywhere)."""
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    mounted: list[int] = []

    def mount(n_bytes: int):
        argv = (["mount", "-o", f"remount,size={int(n_bytes)}", str(mnt)] if mounted else
                ["mount", "-t", "tmpfs", "-o", f"size={int(n_bytes)}", "tmpfs", str(mnt)])
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounted.append(int(n_bytes))
        return mnt

    yield mount
    if mounted:
        from ugrpo import runlock

        for folder in [k for k in runlock._HELD if k.startswith(os.path.realpath(mnt))]:
            runlock.release(folder)  # a command keeps its folder's lock open until the process ends
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)  # still busy: detach it anyway


@pytest.fixture
def fake_vllm(monkeypatch):
    """tests/fakes/vllm importable as ``vllm`` for one test (the real one does not run without CUDA), with
    ugrpo's CUDA-device check bypassed: the fake engine runs on the CPU. Everything is restored afterwards."""
    import sys
    from pathlib import Path

    from ugrpo.lm import vllm_engine

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent / "fakes"))
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "unset")  # restored to its value before the test...
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")  # ...and absent during it: build_engine sets it
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    import vllm

    assert vllm.__version__.endswith("+fake"), vllm.__file__
    monkeypatch.setattr(vllm_engine, "_device_problem", lambda device, option="sampling.backend": None)
    monkeypatch.setattr(vllm.LLM, "instances", [])
    yield vllm
    sys.modules.pop("vllm", None)
