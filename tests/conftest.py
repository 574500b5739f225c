"""Unit tests (``python -m pytest -q``). Helpers the test modules share live beside them (``_overrides.py``)
and are imported by their module names, so ``tests/`` goes on ``sys.path`` (not a package: an installed
``tests`` package in site-packages would shadow it)."""

import copy
import functools
import os
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


# ----------------------------------------------------------------------------- the data beside the repository
@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of GSM8K, MATH-500 and AIME24 (``<repo>/../shared/data`` or ``$VERL_OFFGRPO_TEST_DATA``:
    ``_shared_data``). Where it or one of its files is missing (a clone without ``../shared``), the tests that use
    it skip with a reason that names the missing path, which the default run's summary prints (``-rs`` in
    pyproject's addopts)."""
    from _shared_data import data_dir, missing

    root = data_dir()
    if why := missing(root):
        pytest.skip(why)
    return root


# ----------------------------------------------------------------------------- hydra's yaml files, read once
def _config_file_text(source, config_path: str) -> bytes:
    """The bytes of the yaml file ``source.load_config(config_path)`` reads (file:// and pkg:// sources)."""
    name = source._normalize_file_name(config_path)
    if source.scheme() == "file":
        return Path(os.path.realpath(os.path.join(source.path, name))).read_bytes()
    from importlib import resources

    return resources.files(source.path).joinpath(name).read_bytes()


def _reads_each_file_once(load_config):
    """``ConfigSource.load_config`` that parses a given file's given bytes once per session and hands out
    deep copies: hydra re-reads and re-parses every yaml of verl's ppo_trainer (~30 files) in each
    ``compose`` (its own cache lives for one ``compose``), which was ~40% of the ~170 compositions' time.
    The key holds the file's bytes, so a changed or different file is read afresh; composition itself
    (defaults list, overrides, merges) still runs every time."""
    parsed = {}

    @functools.wraps(load_config)
    def wrapper(self, config_path):
        try:
            key = (type(self), self.path, config_path, _config_file_text(self, config_path))
        except Exception:  # hydra's own call raises its ConfigLoadError for a missing file
            return load_config(self, config_path)
        if key not in parsed:
            parsed[key] = load_config(self, config_path)
        return copy.deepcopy(parsed[key])

    return wrapper


@pytest.fixture(scope="session", autouse=True)
def _hydra_parses_each_yaml_once():
    from hydra.core.plugins import Plugins
    from hydra._internal.sources_registry import SourcesRegistry

    Plugins.instance()  # hydra's plugin scan re-executes its source modules: patch the classes it registers
    mp = pytest.MonkeyPatch()
    for scheme in ("file", "pkg"):
        cls = SourcesRegistry.instance().resolve(scheme)
        mp.setattr(cls, "load_config", _reads_each_file_once(cls.load_config))
    yield
    mp.undo()


# ----------------------------------------------------------------------------- subprocesses, in the background
@pytest.fixture(scope="session", autouse=True)
def _background_jobs(request, tmp_path_factory):
    """The selected tests' subprocesses (the modules' ``BACKGROUND_JOBS``), queued before the first test
    and run one at a time beside the in-process tests (``_background``)."""
    from _background import start_session

    queue = start_session(request.session, tmp_path_factory)
    yield queue
    queue.close()


# ----------------------------------------------------------------------------- one local Ray instance
@pytest.fixture(scope="session", autouse=True)
def _ray_stops_with_the_session():
    """test_sync_hooks.ray_local starts a local Ray instance for the modules that run fake clusters as Ray
    actors (test_sync_hooks, test_window) and leaves it to the next one (~4 s to start and stop); it
    stops here, at the session's end."""
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def ray_env():
    """verl's PPO Ray runtime env without the plugin's marks an earlier validation left; restored after."""
    from verl.trainer import constants_ppo

    from verl_offgrpo.patches import FINAL_OUTPUTS_ENV, JOB_ENV

    saved = dict(constants_ppo.PPO_RAY_RUNTIME_ENV.setdefault("env_vars", {}))
    for name in (JOB_ENV, FINAL_OUTPUTS_ENV):
        constants_ppo.PPO_RAY_RUNTIME_ENV["env_vars"].pop(name, None)
    yield constants_ppo
    constants_ppo.PPO_RAY_RUNTIME_ENV["env_vars"].clear()
    constants_ppo.PPO_RAY_RUNTIME_ENV["env_vars"].update(saved)
