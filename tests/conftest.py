"""Unit tests (``python -m pytest -q``). Helpers the test modules share live beside them (``_overrides.py``)
and are imported by their module names, so ``tests/`` goes on ``sys.path`` (not a package: an installed
``tests`` package in site-packages would shadow it)."""

import copy
import functools
import os
import pickle
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


# ----------------------------------------------------------------------------- hydra's defaults, merged once
def _tree_stamp(root) -> tuple:
    """(relative path, mtime, size) of every file under ``root``: a changed, added or removed file changes it."""
    stamp = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            st = os.stat(os.path.join(folder, name))
            stamp.append((os.path.relpath(os.path.join(folder, name), root), st.st_mtime_ns, st.st_size))
    return tuple(stamp)


def _store_stamp(node, prefix="") -> tuple:
    """The ConfigStore's entries by path and object: a ``store`` call (a new ConfigNode) changes it."""
    stamp = []
    for name in sorted(node):
        value = node[name]
        stamp.extend(_store_stamp(value, f"{prefix}/{name}") if isinstance(value, dict)
                     else [(f"{prefix}/{name}", id(value))])
    return tuple(stamp)


def _sources_stamp(repo) -> tuple:
    """What the defaults list and the merged defaults of a composition read besides its overrides: every
    config source's files (or the ConfigStore's entries) as they are now."""
    from hydra.core.config_store import ConfigStore

    stamp = []
    for source in repo.get_sources():
        scheme = source.scheme()
        if scheme == "file":
            files = _tree_stamp(source.path)
        elif scheme == "pkg":
            from importlib import resources

            root = resources.files(source.path)
            files = _tree_stamp(root) if isinstance(root, Path) else None  # not a folder: not cached
        elif scheme == "structured":
            files = _store_stamp(ConfigStore.instance().repo)
        else:
            files = None
        if files is None:
            return None
        stamp.append((type(source), scheme, source.path, source.provider, files))
    return tuple(stamp)


def _merges_each_defaults_list_once(create_defaults_list, compose_from_defaults):
    """``create_defaults_list`` and ``ConfigLoaderImpl._compose_config_from_defaults_list`` that build a
    composition's defaults list and merge its ~30 configs once per session for a given config name, set of
    group (and sweep) overrides, hydra version base and state of every config source, and hand out a deep
    copy of the merged config (pickled once, unpickled each time: ~2x faster than ``copy.deepcopy``): that
    was ~85% of each of the ~400 compositions (~1.1 of ~1.3 s). The config (value) overrides, which hydra's
    defaults list only carries along (``Overrides.config_overrides``), the struct flag, every override's
    application and the hydra node still run in each compose."""
    from hydra import version
    from hydra._internal.defaults_list import DefaultsList

    built = {}  # key -> DefaultsList built without the config overrides
    merged = {}  # id(DefaultsList.defaults) -> (defaults, the config merged from them)

    def config_overrides(repo, overrides_list):
        # Overrides.__init__'s own split, the same calls in the same order
        return [o for o in overrides_list if not o.is_sweep_override()
                and (isinstance(o.value(), dict) or not repo.group_exists(o.key_or_group))]

    @functools.wraps(create_defaults_list)
    def cached_defaults_list(repo, config_name, overrides_list, prepend_hydra, skip_missing):
        values = config_overrides(repo, overrides_list)
        stamp = _sources_stamp(repo)
        if stamp is None:
            return create_defaults_list(repo=repo, config_name=config_name, overrides_list=overrides_list,
                                        prepend_hydra=prepend_hydra, skip_missing=skip_missing)
        rest = [o for o in overrides_list if not any(o is v for v in values)]
        key = (config_name, prepend_hydra, skip_missing, version.getbase(), stamp, tuple(o.input_line for o in rest))
        if key not in built:
            built[key] = create_defaults_list(repo=repo, config_name=config_name, overrides_list=rest,
                                              prepend_hydra=prepend_hydra, skip_missing=skip_missing)
        base = built[key]
        overrides = copy.copy(base.overrides)
        overrides.config_overrides = values
        return DefaultsList(defaults=base.defaults, defaults_tree=base.defaults_tree, config_overrides=values,
                            overrides=overrides)

    @functools.wraps(compose_from_defaults)
    def cached_compose(self, defaults, repo):
        if not any(defaults is base.defaults for base in built.values()):
            return compose_from_defaults(self, defaults=defaults, repo=repo)
        if id(defaults) not in merged:
            cfg = compose_from_defaults(self, defaults=defaults, repo=repo)
            merged[id(defaults)] = (defaults, pickle.dumps(cfg, protocol=pickle.HIGHEST_PROTOCOL))
        return pickle.loads(merged[id(defaults)][1])  # a deep copy, ~1.5x faster than copy.deepcopy here

    return cached_defaults_list, cached_compose


@pytest.fixture(scope="session", autouse=True)
def _hydra_merges_each_defaults_list_once(_hydra_parses_each_yaml_once):
    from hydra._internal import config_loader_impl
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    mp = pytest.MonkeyPatch()
    defaults_list, compose = _merges_each_defaults_list_once(
        config_loader_impl.create_defaults_list, ConfigLoaderImpl._compose_config_from_defaults_list)
    mp.setattr(config_loader_impl, "create_defaults_list", defaults_list)
    mp.setattr(ConfigLoaderImpl, "_compose_config_from_defaults_list", compose)
    yield
    mp.undo()


# ----------------------------------------------------------------------------- omegaconf's interpolations, parsed once
def _parses_each_interpolation_once(parse):
    """omegaconf's grammar ``parse`` that parses a given string once per session: resolving an interpolation
    re-parses its string with ANTLR each time, and the plugin's ``missing_values`` (``OmegaConf.missing_keys``,
    in every ``validate_config``) resolves each of the composed config's ~140 interpolations, which was ~half
    of each validation. The parse tree is a pure function of the string, rule and lexer mode, and resolving
    only reads it (each token keeps its own input stream); a string that fails to parse raises each time."""
    trees = {}

    @functools.wraps(parse)
    def wrapper(value, parser_rule="configValue", lexer_mode="DEFAULT_MODE"):
        key = (value, parser_rule, lexer_mode)
        if key not in trees:
            trees[key] = parse(value, parser_rule, lexer_mode)
        return trees[key]

    return wrapper


@pytest.fixture(scope="session", autouse=True)
def _omegaconf_parses_each_interpolation_once():
    from omegaconf import base

    mp = pytest.MonkeyPatch()
    mp.setattr(base, "parse", _parses_each_interpolation_once(base.parse))
    yield
    mp.undo()


# ----------------------------------------------------------------------------- subprocesses, in the background
def _waits_for_jobs(item) -> bool:
    """Whether the item's module has subprocesses in the background (``BACKGROUND_JOBS``)."""
    return hasattr(getattr(item, "module", None), "BACKGROUND_JOBS")


def _runs_fake_clusters(item) -> bool:
    """Whether the item's module runs fake clusters as Ray actors (its module-scoped ``ray_local`` fixture
    starts the local Ray instance: test_sync_hooks, test_window)."""
    return hasattr(getattr(item, "module", None), "ray_local")


def pytest_collection_modifyitems(session, config, items):
    """The modules that wait for background subprocesses (``BACKGROUND_JOBS``) run after the others, in their
    order: their ~10 subprocesses (each a fresh interpreter importing verl, ~10 s of CPU) then run on the
    second core while the other modules' in-process tests run, instead of keeping the in-process tests
    waiting for them (the job modules are early in the alphabet). The modules that run fake clusters on Ray
    run last, one after the other (one local Ray instance serves both): their actors' processes import verl
    and torch on both cores once the queue is done, and the job modules validate selecting configs in-process
    without a Ray instance running (the plugin refuses those in a process whose Ray runs without its marks).
    Within each group the order is pytest's."""
    items[:] = sorted(items, key=lambda item: (_runs_fake_clusters(item), _waits_for_jobs(item)))


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
    actors (test_sync_hooks, test_window, which run last: ``pytest_collection_modifyitems``) and leaves it
    to the next one (~4 s to start and stop); it stops here, at the session's end."""
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
