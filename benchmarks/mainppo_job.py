"""One verl ``main_ppo`` job on the GPU machine, shared by every GPU benchmark script.

* the job: :func:`main_ppo_cmd` (verl's ``python3 -m verl.trainer.main_ppo`` over the plugin's
  shipped yaml) with hydra overrides (:func:`set_overrides`), in :func:`run_env` (offline, verl's
  ``file`` logger to a jsonl, the plugin loaded loudly, optional stack dumps);
* watching it: :func:`launch` records when each step's metrics arrive, the start-up time, GPU and
  host memory (:func:`memory_sample`, :func:`memory_summary`), stops a stalled or timed-out job after
  dumping every process's stacks (``benchmarks/diag/sitecustomize.py``), and :func:`save_logs`
  copies its console log, metrics file and dumps to ``OUT/logs`` so they come back from the GPU;
  :func:`run_main_ppo` is all of that for one named job; :func:`on_gpus` runs several jobs side by
  side on a multi-GPU machine;
* reading it: :func:`parse_jsonl` (the metrics file), :func:`parse_console` (verl's console lines),
  :func:`read_metrics` (a job's saved files, whichever holds its metrics), :func:`pick`, and :func:`versions` (library versions and the GPU name).
"""

from __future__ import annotations

import gzip
import json
import os
import queue
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def set_overrides(base: list[str], updates: dict[str, object]) -> list[str]:
    """``base`` with the ``key=value`` entries of ``updates`` replaced or appended (``+key`` kept)."""
    out = [o for o in base if o.split("=", 1)[0].lstrip("+") not in updates]
    return out + [f"{k}={v}" for k, v in updates.items()]


#: a control job's name (``throughput.py --control NAME=…``), and a row's layout as throughput.py labels
#: it: ``<n>gpu-tp<tp>[-offload]``, plus ``-NAME`` for a control job (gen_split.py and plot_results.py
#: find the layout a control job controls by it)
CONTROL_NAME = r"[a-z0-9]+"
LAYOUT_AND_CONTROL = rf"(?P<layout>\d+gpu-tp\d+(?:-offload)?)(?:-(?P<control>{CONTROL_NAME}))?"


def keep_weights_updates(mode: str) -> dict[str, object]:
    """The overrides of ``algorithm.off_grpo.keep_weights=mode``: ``no_sleep`` also needs vLLM never
    to free its engine (``rollout.free_cache_engine=False``; the plugin's startup check refuses it
    otherwise at v > 1, and at v = 1 vLLM would still sleep)."""
    updates: dict[str, object] = {"algorithm.off_grpo.keep_weights": mode}
    if mode == "no_sleep":
        updates["actor_rollout_ref.rollout.free_cache_engine"] = False
    return updates


_NUM = re.compile(r"^(?:np\.\w+\()?(-?[\d.eE+-]+|nan|inf|-inf)\)?$")


def parse_console(text: str) -> dict[int, dict]:
    """verl's console logger: 'step:N - key:value - ...' (values may print as np.float64(x))."""
    rows: dict[int, dict] = {}
    for line in text.splitlines():
        idx = line.find("step:")
        if idx < 0 or " - " not in line[idx:]:
            continue
        parts = line[idx:].strip().split(" - ")
        try:
            step = int(parts[0].split(":", 1)[1])
        except ValueError:
            continue
        row = rows.setdefault(step, {})
        for part in parts[1:]:
            if ":" not in part:
                continue
            key, _, val = part.rpartition(":")
            m = _NUM.match(val.strip())
            if m:
                try:
                    row[key.strip()] = float(m.group(1))
                except ValueError:
                    pass
    return rows


def parse_jsonl(path: Path) -> dict[int, dict]:
    """Per-step metrics of verl's metrics file (``.jsonl``, or gzipped ``.jsonl.gz``); a line cut off
    by a killed job is skipped."""
    rows: dict[int, dict] = {}
    if not path.exists():
        return rows
    for line in read_saved_text(path, errors="strict").splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        rows.setdefault(int(rec["step"]), {}).update(rec.get("data", {}))
    return rows


def read_metrics(log_dir: Path, tag: str) -> tuple[dict[int, dict], str]:
    """A job's per-step metrics from ``log_dir``: its metrics file ``<tag>.jsonl`` (or ``.jsonl.gz``) if
    it has any, else its console log ``<tag>.log`` (or ``.log.gz``; :func:`save_logs` keeps only a long
    console log's tail, the metrics file whole). Returns ``(metrics, source file name)``, or ``({}, "")``
    when neither is there."""
    for jsonl in (log_dir / f"{tag}.jsonl", log_dir / f"{tag}.jsonl.gz"):
        if metrics := parse_jsonl(jsonl):
            return metrics, jsonl.name
    for name in (f"{tag}.log", f"{tag}.log.gz"):
        path = log_dir / name
        if path.exists():
            return read_metrics_file(path), name
    return {}, ""


def read_metrics_file(path: Path) -> dict[int, dict]:
    """Per-step metrics of one saved file: a metrics file (``.jsonl[.gz]``) or a console log (``.log[.gz]``)."""
    return parse_jsonl(path) if ".jsonl" in path.name else parse_console(read_saved_text(path))


def read_saved_text(path: Path, errors: str = "replace") -> str:
    """A saved file's text, gunzipped if its name ends in ``.gz`` (a console log's undecodable bytes
    replaced; a metrics file's are an error)."""
    raw = path.read_bytes()
    return (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode(errors=errors)


def pick(row: dict, *names, suffix: str | None = None):
    for name in names:
        if name in row:
            return row[name]
    if suffix:
        for key, val in row.items():
            if key.endswith(suffix):
                return val
    return None


def versions() -> dict:
    out = {}
    for mod in ("verl", "vllm", "torch", "transformers"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception as err:  # noqa: BLE001
            out[mod] = f"unavailable: {type(err).__name__}"
    try:
        import torch

        out["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    except Exception:  # noqa: BLE001
        out["device"] = "unknown"
    return out


def kill_group(proc: subprocess.Popen) -> None:
    """Stop what is left of the run's process group (ours only, by its id)."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass
        time.sleep(1 if sig == signal.SIGTERM else 0)


def run_env(jsonl: Path, stack_dir: Path | None = None, **extra: str) -> dict:
    """Environment of one main_ppo run: offline, jsonl file logger, the repo's plugin loaded loudly.

    With ``stack_dir``, every Python process of the run can dump its stacks on demand
    (``benchmarks/diag/sitecustomize.py``; see :func:`launch`); with :data:`SHARED_GPU_ENV` ``=1`` in
    ``extra`` (:func:`on_gpus`), vLLM's sleep tolerates a neighbour on its GPU (``diag/shared_gpu_sleep.py``).
    ``VERL_USE_EXTERNAL_MODULES`` in ``extra`` adds to the driver's, not replaces it (then the plugin, last).
    """
    env = dict(os.environ)
    # every job starts its own local Ray cluster: a RAY_ADDRESS would make side-by-side jobs
    # (on_gpus) join one cluster and share GPUs
    env.pop("RAY_ADDRESS", None)
    env.update(
        VERL_FILE_LOGGER_PATH=str(jsonl),
        VLLM_USE_FLASHINFER_SAMPLER="0",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
        RAY_DEDUP_LOGS="0",
        VERL_REPLAY_BUFFER_DEBUG_INTERVAL_SECONDS="20",
        **extra,
    )
    paths = [str(REPO), env.get("PYTHONPATH", "")]
    if stack_dir is not None:
        env["OFFGRPO_STACK_DUMP_DIR"] = str(stack_dir)
    if stack_dir is not None or env.get(SHARED_GPU_ENV) == "1":
        paths.insert(0, str(REPO / "benchmarks" / "diag"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    # load the plugin explicitly in every verl process (errors propagate, unlike entry points,
    # which verl logs at DEBUG); harmless if the entry point is installed too
    extern = [m for source in (os.environ, extra) for m in source.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m]
    env["VERL_USE_EXTERNAL_MODULES"] = ",".join(dict.fromkeys([*extern, "verl_offgrpo.plugin"]))
    return env


def main_ppo_cmd(overrides_list: list[str]) -> list[str]:
    """``python -m verl.trainer.main_ppo`` with the plugin's shipped yaml and the given overrides."""
    return [
        sys.executable, "-m", "verl.trainer.main_ppo",
        "--config-path", str(REPO / "verl_offgrpo" / "config"), "--config-name", "off_grpo_trainer",
        *overrides_list,
    ]  # fmt: skip


#: return code of a job that logged every step but did not exit within the grace period (then killed)
EXIT_HANG = 125


#: what a TransferQueue storage unit's process is called (verl 0.9.1's ``transfer_queue``: the Ray actor
#: ``SimpleStorageUnit``, which holds every rollout the replay buffer has not handed out yet)
STORAGE_UNIT_PROCESS = "SimpleStorageUnit"


#: where :func:`_procs_stat` reads the processes (a folder of ``PID/stat`` and ``PID/cmdline`` in tests)
PROC_ROOT = Path("/proc")


def _procs_stat() -> Iterator[tuple[Path, str, int, int]]:
    """``(/proc/PID, state, process group, session)`` of every process (none without ``/proc``); a
    process that ends while it is read is left out."""
    for proc in PROC_ROOT.glob("[0-9]*"):
        try:
            text = (proc / "stat").read_text()
            state, _ppid, pgrp, session = text[text.rindex(")") + 2 :].split()[:4]
            yield proc, state, int(pgrp), int(session)
        except (OSError, ValueError):
            continue


def _group_cmdlines(group: int) -> Iterator[tuple[Path, str]]:
    """``(/proc/PID, command line)`` of each process of process group or session ``group`` (a job
    started in its own session: :func:`launch`; Ray's workers and vLLM's processes stay in it); the
    command line's NULs as spaces, so a title set with ``setproctitle`` reads as it does in ``ps``."""
    for proc, _state, pgrp, session in _procs_stat():
        if group not in (pgrp, session):
            continue
        try:
            yield proc, (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:  # the process ended while we looked
            continue


def group_rss_mib(group: int, marker: str = STORAGE_UNIT_PROCESS, procs: list | None = None) -> float | None:
    """Resident memory (MiB) of the processes of process group or session ``group`` whose command
    line holds ``marker``; None when there is none (or no ``/proc``). ``procs``: the group's
    :func:`_group_cmdlines`, if already read."""
    total, found = 0.0, False
    for proc, cmdline in _group_cmdlines(group) if procs is None else procs:
        if marker not in cmdline:
            continue
        try:
            rss_pages = int((proc / "statm").read_text().split()[1])
        except (OSError, ValueError, IndexError):  # the process ended while we looked
            continue
        total += rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**20
        found = True
    return total if found else None


#: the roles of a job's processes in its per-process GPU memory (:func:`gpu_mib_by_role`)
GPU_ROLES = ("actor", "vllm", "other")
#: Ray actor names (the title ``ray::NAME`` or ``ray::NAME.method``) of verl's FSDP workers: the fused
#: actor/rollout/ref ``WorkerDict`` (or ``FusedWorker_…``), and the unfused classes
ACTOR_RAY_NAMES = ("WorkerDict", "FusedWorker", "ActorRollout", "ActorWorker", "TrainingWorker")


def process_role(cmdline: str) -> str:
    """The role of a job's process from its command line's first word, the title Ray and vLLM give
    their processes: ``vllm`` for vLLM's own processes (``VLLM::EngineCore``, ``VLLM::Worker_TP0``, …:
    verl 0.9.1 starts vLLM with its ``mp`` executor, so the engine's workers are processes of their own)
    and verl's Ray actors named after vLLM (``ray::vLLMHttpServer``); ``actor`` for verl's FSDP workers
    (:data:`ACTOR_RAY_NAMES`); ``other`` for anything else (the driver, ``ray::TaskRunner``, an
    untitled process). Only the title is read: the driver's arguments name vLLM too."""
    title = cmdline.split(" ", 1)[0]
    if title.lower().startswith("vllm::"):
        return "vllm"
    if title.startswith("ray::"):
        name = title[len("ray::"):].split(".", 1)[0]
        if "vllm" in name.lower():
            return "vllm"
        if any(marker in name for marker in ACTOR_RAY_NAMES):
            return "actor"
    return "other"


def _nvidia_smi(query: str, *extra: str) -> list[list[str]] | None:
    """``nvidia-smi QUERY --format=csv,noheader,nounits EXTRA…`` as rows of stripped fields; None
    without nvidia-smi, on an error or an empty answer."""
    try:
        out = subprocess.run(["nvidia-smi", query, "--format=csv,noheader,nounits", *extra],
                             capture_output=True, text=True, timeout=5)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [[field.strip() for field in line.split(",")] for line in out.stdout.splitlines() if line.strip()]
    return rows if out.returncode == 0 and rows else None


def gpu_mib_by_role(group: int, uuids: set[str] | None = None, procs: list | None = None) -> dict[str, float] | None:
    """GPU memory (MiB, ``nvidia-smi --query-compute-apps``) of the processes of process group or
    session ``group``, summed by :func:`process_role` (each role present, 0 where no process of it
    holds any), on the GPUs ``uuids`` (all with None). A job's total (:func:`memory_sample`'s
    ``gpu_mib``) does not say whether the FSDP actor or vLLM holds a peak; this does.

    None when no process of the group is in nvidia-smi's list: no list (inside a container nvidia-smi
    may list no processes), ``used_memory`` unknown (``[N/A]``), or pids of another PID namespace
    (the host's, which mean nothing in this one). Nothing is guessed then. (On the lab's nvidia-h200
    machine nvidia-smi listed a CUDA process under the pid ``/proc`` gives it.) ``procs``: the group's
    :func:`_group_cmdlines`, if already read."""
    rows = _nvidia_smi("--query-compute-apps=pid,gpu_uuid,used_memory")
    used: dict[int, float] = {}
    for row in rows or []:
        try:
            pid, uuid, mib = int(row[0]), row[1], float(row[2])
        except (ValueError, IndexError):
            continue
        if uuids is None or uuid in uuids:
            used[pid] = used.get(pid, 0.0) + mib  # a process on two of the job's GPUs: both
    if not used:
        return None
    roles, found = dict.fromkeys(GPU_ROLES, 0.0), False
    for proc, cmdline in _group_cmdlines(group) if procs is None else procs:
        if int(proc.name) in used:
            roles[process_role(cmdline)] += used[int(proc.name)]
            found = True
    return roles if found else None


def memory_sample(gpus: str | None = None, group: int | None = None) -> dict:
    """Used memory now: the GPUs' (``nvidia-smi``, MiB, summed over ``gpus`` = a ``CUDA_VISIBLE_DEVICES``
    list, or over every GPU; absent without nvidia-smi), the host's (MiB) and, with ``group`` (a job's
    process group), ``storage_mib``: the resident memory of its TransferQueue storage units
    (:func:`group_rss_mib`), where the replay buffer's rollouts wait, and ``gpu_mib_by_role``: its
    processes' GPU memory on those GPUs by role (:func:`gpu_mib_by_role`; absent where nvidia-smi
    lists none of them). The GPUs are picked by ``-i`` (nvidia-smi's indices, as the lab assumes of
    ``CUDA_VISIBLE_DEVICES``) and matched to the per-process rows by their UUIDs."""
    sample: dict = {}
    procs = list(_group_cmdlines(group)) if group is not None else None  # one pass over /proc a sample
    if group is not None:
        storage = group_rss_mib(group, procs=procs)
        if storage is not None:
            sample["storage_mib"] = storage
    gpu_rows = _nvidia_smi("--query-gpu=uuid,memory.used", *(["-i", gpus] if gpus else []))
    if gpu_rows:
        try:
            sample["gpu_mib"] = float(sum(float(row[1]) for row in gpu_rows))
        except (ValueError, IndexError):
            pass
        by_role = gpu_mib_by_role(group, {row[0] for row in gpu_rows}, procs) if group is not None else None
        if by_role is not None:
            sample["gpu_mib_by_role"] = by_role
    info = _meminfo_mib()
    if "MemTotal" in info and "MemAvailable" in info:
        sample["host_mib"] = info["MemTotal"] - info["MemAvailable"]
    return sample


def _meminfo_mib() -> dict[str, float]:
    """``/proc/meminfo`` in MiB (empty where there is none)."""
    try:
        lines = Path("/proc/meminfo").read_text().splitlines()
        return {key: float(value.split()[0]) / 1024 for key, value in (line.split(":", 1) for line in lines if ":" in line)}
    except (OSError, ValueError, IndexError):
        return {}


def group_alive(pgid: int) -> bool:
    """Whether any process of process group ``pgid`` is still running (zombies, which hold no memory
    and no CPU, do not count; without ``/proc``, any member does)."""
    procfs = Path("/proc")
    if not procfs.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    return any(pgrp == pgid and state != "Z" for _proc, state, pgrp, _session in _procs_stat())


def host_state(gpus: str | None = None, group: int | None = None, settle_s: float = 0.0) -> dict:
    """The host between jobs, recorded before and after each one (``host_before`` / ``host_after``):
    :func:`memory_sample`, shared memory (``Shmem``: ``/dev/shm`` and other tmpfs, MiB) and the 1-minute
    load average; with ``group``, after waiting up to ``settle_s`` for that process group to end,
    ``group_left`` (a process of it still runs). Jobs run one after the other on one machine are only
    comparable if the first left nothing behind (a 2-GPU lease's second job ran 27 % slower: benchmarks/NOTEBOOK.md §3)."""
    deadline = time.monotonic() + settle_s
    while group is not None and group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.5)
    state: dict[str, float | bool] = {**memory_sample(gpus)}
    shmem = _meminfo_mib().get("Shmem")
    if shmem is not None:
        state["shm_mib"] = shmem
    if hasattr(os, "getloadavg"):
        state["load_1m"] = os.getloadavg()[0]
    if group is not None:
        state["group_left"] = group_alive(group)
    return state


def memory_and_host(progress: dict) -> dict:
    """What a results file keeps of :func:`launch`'s memory and host records for one run:
    ``memory_during_training``, ``host_before`` and ``host_after``."""
    return {"memory_during_training": progress.get("memory"), "host_before": progress.get("host_before"),
            "host_after": progress.get("host_after")}  # fmt: skip


def bootstrap_interval(first: list[float], second: list[float], combine, statistic, level: float = 0.9,
                       resamples: int = 4000, seed: int = 0) -> list[float]:
    """Bootstrap interval of ``combine(statistic(first), statistic(second))`` for two independent
    samples (two jobs): each resampled with replacement ``resamples`` times with a fixed seed (``first``
    drawn first); the (1 − level)/2 and (1 + level)/2 percentiles of the combined resampled statistics."""
    import numpy as np

    rng = np.random.default_rng(seed)
    a, b = np.asarray(first, dtype=float), np.asarray(second, dtype=float)
    stat_a = statistic(a[rng.integers(0, len(a), (resamples, len(a)))], axis=1)
    stat_b = statistic(b[rng.integers(0, len(b), (resamples, len(b)))], axis=1)
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(combine(stat_a, stat_b), [tail, 100 - tail])
    return [float(low), float(high)]


def memory_summary(samples: list[dict], after_s: float | None, arrival: dict[int, float] | None = None) -> dict:
    """Max and median of the samples taken from ``after_s`` on (the first logged step: training only);
    for each max also ``max_at_s`` (seconds after launch) and, with ``arrival`` (step → seconds after
    launch at which its metrics appeared), ``max_in_step``: the step that was running then (the first
    step logged after the sample), so a peak can be put in a window's generation step or elsewhere.

    For the GPUs also who held the memory (the samples' ``gpu_mib_by_role``): ``max_by_role``, the
    roles' MiB in the sample of the total's max (None if that sample has none), and ``by_role``, each
    role's own max (with ``max_at_s`` / ``max_in_step``; a role may peak at another moment than the
    total); ``by_role`` is None when no sample has a per-process reading (nvidia-smi in a container)."""

    def peak(kept: list[dict], value: Callable[[dict], float]) -> tuple[dict, dict]:
        """The sample of the max and its ``max`` / ``max_at_s`` / ``max_in_step``."""
        top = max(kept, key=value)
        at = {"max": value(top), "max_at_s": round(top["t"], 1)}
        later = [step for step, t in (arrival or {}).items() if t >= top["t"]]
        if later:
            at["max_in_step"] = min(later)
        return top, at

    out = {}
    for key in ("gpu_mib", "host_mib", "storage_mib"):
        kept = [v for v in samples if key in v and (after_s is None or v["t"] >= after_s)]
        if not kept:
            continue
        xs = sorted(v[key] for v in kept)
        top, at = peak(kept, lambda v, key=key: v[key])
        out[key] = {**at, "median": xs[len(xs) // 2], "n": len(xs)}
        if key == "gpu_mib":
            with_roles = [v for v in kept if "gpu_mib_by_role" in v]
            out[key]["max_by_role"] = top.get("gpu_mib_by_role")
            out[key]["by_role"] = {
                role: peak(with_roles, lambda v, role=role: v["gpu_mib_by_role"].get(role, 0.0))[1]
                for role in GPU_ROLES
            } if with_roles else None  # fmt: skip
    return out


#: seconds between two memory samples of a running job (:func:`launch`): the metrics file is read as often
MEM_SAMPLE_S = 2.0


#: seconds between a running job's progress lines on the console (:func:`progress_line`)
PROGRESS_S = 60.0


def progress_line(name: str, now: float, arrival: dict[int, float], steps: int) -> str:
    """``[progress] <job> <s>s: step <last>/<steps>`` (``starting`` before its first logged step)."""
    if not arrival:
        return f"[progress] {name} {now:.0f}s: starting"
    return f"[progress] {name} {now:.0f}s: step {max(arrival)}/{steps}"


def launch(cmd, env, name, log_dir: Path, jsonl: Path, timeout: float, steps: int, stall_s: float = 120.0,
           exit_grace_s: float = 60.0, mem_sample_s: float = MEM_SAMPLE_S, startup_s: float | None = None):
    """Run one training job, watching its metrics file; returns ``(rc, progress)``.

    ``rc``: the job's exit status, 124 if killed for a timeout or stall, :data:`EXIT_HANG` if it logged
    all ``steps`` but had not exited ``exit_grace_s`` later. ``startup_s`` (None: no limit): a job with no
    logged step that long after launch counts as stalled (a start-up that hangs).

    ``progress``: ``startup_s`` (launch → first logged step), ``step_arrival_s`` (seconds after launch
    at which each step's metrics appeared), ``stalled`` (no new step for ``stall_s`` after the first
    one, or none within the timeout), ``stack_dump`` (folder of per-process stack dumps taken before
    killing a stalled run, when ``env`` has ``OFFGRPO_STACK_DUMP_DIR``), ``memory``
    (:func:`memory_summary`: max / median of GPU and host memory in use, sampled every ``mem_sample_s``
    from the first logged step on, plus the time the sample itself takes (two nvidia-smi calls and a
    read of ``/proc``), so a shorter peak may be missed; GPU memory of the job's ``CUDA_VISIBLE_DEVICES``
    only, when ``env`` sets it, also by role of the job's processes; ``storage_mib``, its TransferQueue
    storage units' resident memory), ``host_before`` and
    ``host_after`` (:func:`host_state` before the launch and after the group is killed).
    """
    console = log_dir / f"{name}.log"
    host_before = host_state(env.get("CUDA_VISIBLE_DEVICES"))
    start = time.time()
    arrival: dict[int, float] = {}
    mem: list[dict[str, float]] = []
    stalled = False
    printed = 0.0
    with open(console, "w") as fh:
        # own session: on a timeout the whole local Ray cluster (raylet, workers, vLLM) goes with it
        proc = subprocess.Popen(
            cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, cwd=str(log_dir), start_new_session=True
        )
        rc = None
        while rc is None:
            try:
                rc = proc.wait(timeout=mem_sample_s)
            except subprocess.TimeoutExpired:
                pass
            now = time.time() - start
            for step in parse_jsonl(jsonl):
                arrival.setdefault(step, now)
            if now - printed >= PROGRESS_S:  # what a detached run's console says while it runs (detach.sh wait)
                printed = now
                print(progress_line(name, now, arrival, steps), flush=True)
            mem.append({"t": now, **memory_sample(env.get("CUDA_VISIBLE_DEVICES"), group=proc.pid)})
            if rc is not None:
                break
            last = max(arrival.values()) if arrival else None
            if len(arrival) >= steps:
                if now - last > exit_grace_s:  # every step logged, but the job does not exit
                    rc = EXIT_HANG
                continue
            hung_start = last is None and startup_s is not None and now > startup_s
            if (last is not None and now - last > stall_s) or hung_start or now > timeout:
                stalled = last is None or now - last > stall_s
                rc = 124
        # stacks say where a stalled job hangs; a job stopped at its time limit while still logging
        # steps (the 7B runs) needs none, and the dump would cost seconds of the command's budget
        stack_dir = env.get("OFFGRPO_STACK_DUMP_DIR") if stalled else None
        if stack_dir and proc.poll() is None:
            Path(stack_dir).mkdir(parents=True, exist_ok=True)
            (Path(stack_dir) / "DUMP").touch()
            time.sleep(6)
        kill_group(proc)
    host_after = host_state(env.get("CUDA_VISIBLE_DEVICES"), group=proc.pid, settle_s=HOST_SETTLE_S)
    return rc, {
        "startup_s": round(min(arrival.values()), 1) if arrival else None,
        "step_arrival_s": {str(k): round(v, 1) for k, v in sorted(arrival.items())},
        "stalled": stalled,
        "stack_dump": stack_dir,
        "memory": memory_summary(mem, min(arrival.values()) if arrival else None, arrival),
        "host_before": host_before,
        "host_after": host_after,
    }


def save_logs(out: Path, name: str, log_dir: Path, stack_dir: Path | None, keep_bytes: int = 400_000) -> None:
    """Copy the run's console log (tail), metrics file and stack dumps into ``OUT/logs`` (they come
    back from the GPU)."""
    dest = out / "logs"
    dest.mkdir(parents=True, exist_ok=True)
    metrics = log_dir / f"{name}.jsonl"
    if metrics.exists():
        (dest / metrics.name).write_bytes(metrics.read_bytes())
    console = log_dir / f"{name}.log"
    if console.exists():
        data = console.read_bytes()[-keep_bytes:]
        (dest / f"{name}.log").write_bytes(data)
    if stack_dir is not None and stack_dir.exists():
        dumps = sorted(f for f in stack_dir.glob("*.txt"))
        with open(dest / f"{name}.stacks.txt", "w") as fh:
            for f in dumps:
                fh.write(f"===== {f.name}\n{f.read_text(errors='replace')}\n")


def read_merge(path: str | None) -> dict | None:
    """The earlier results file that ``--merge path`` names (None without ``--merge``). A path that does
    not exist stops the command before any GPU work: a mistyped or lost file would otherwise give a
    result that silently lacks every earlier run (it happened once, with a copy kept in ``$OUT``,
    which every device call empties). Leave ``--merge`` out to start a new file."""
    if not path:
        return None
    if not Path(path).is_file():
        raise SystemExit(f"--merge {path}: no such file (leave --merge out to start a new results file)")
    return json.loads(Path(path).read_text())


def write_results(name: str, result: dict, out: Path, work: Path | None = None) -> None:
    """Write ``result`` as ``OUT/<name>`` and, with ``work``, ``WORK/<name>`` too (the work dir outlives
    ``$OUT`` on the GPU machine: the next command's ``--merge``); then :func:`pack_logs`."""
    text = json.dumps(result, indent=1, default=str)
    (out / name).write_text(text)
    if work is not None:
        (work / name).write_text(text)
    pack_logs(out)


#: files a device call brings back from ``$OUT`` (the device tool's limit): more and the rest are left there
DEVICE_RETURN_FILES = 8


def pack_logs(out: Path, max_files: int = DEVICE_RETURN_FILES) -> Path | None:
    """If ``OUT`` holds more than ``max_files`` files, pack ``OUT/logs`` into ``OUT/logs.tar.gz`` (and
    drop the loose copies) so that every log comes back from the GPU machine; the archive's members
    are ``logs/<name>``. Returns the archive, or None when nothing was packed."""
    import tarfile

    logs = out / "logs"
    if not logs.is_dir() or not any(logs.iterdir()) or sum(f.is_file() for f in out.rglob("*")) <= max_files:
        return None  # (an empty ``logs`` dir, e.g. a CPU rebuild into ``benchmarks/results/``, is not packed)
    archive = out / "logs.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for f in sorted(logs.iterdir()):
            tar.add(f, arcname=f"logs/{f.name}")
    for f in logs.iterdir():
        f.unlink()
    logs.rmdir()
    return archive


#: seconds between the starts of the first side-by-side jobs (:func:`on_gpus`): their Ray clusters,
#: vLLM engines and process groups each pick free ports at start; staggered starts keep those picks apart
ON_GPUS_STAGGER_S = 15.0


def selects_plugin(overrides: list[str]) -> bool:
    """Whether a job of the plugin's yaml with these hydra ``overrides`` selects the plugin
    (:func:`verl_offgrpo.patches.selection.config_selects` on the yaml's own values with the overrides on top):
    verl's stock PPO jobs (``bigbatch``) do not, and then run plain verl, unpatched."""
    from omegaconf import OmegaConf

    from verl_offgrpo.patches.selection import config_selects

    config = OmegaConf.load(REPO / "verl_offgrpo" / "config" / "off_grpo_settings.yaml")
    OmegaConf.set_struct(config, False)
    for item in overrides:
        key, _, value = item.lstrip("+").partition("=")
        if not item.startswith("~"):
            OmegaConf.update(config, key, OmegaConf.from_dotlist([f"v={value}"]).v, merge=True)
    return config_selects(config)


def plain_jobs_side_by_side(job_overrides: dict[str, list[str]], concurrent: bool,
                            unique_socket: frozenset[str] = frozenset()) -> str | None:
    """Why these jobs cannot run at the same time on one host, or None: two jobs that do not select the
    plugin run verl 0.9.1's weight transfer unpatched, and its IPC socket path is the same for every fresh
    Ray cluster (``verl_offgrpo/patches/ipc_socket.py``): one vLLM could load the other job's weights.
    Jobs named in ``unique_socket`` load the lab's rename (``benchmarks/diag/unique_socket.py``) and count as safe."""
    plain = [name for name, overrides in job_overrides.items()
             if name not in unique_socket and not selects_plugin(overrides)]
    if concurrent and len(plain) > 1:
        return (f"jobs {', '.join(plain)} run plain verl side by side: verl 0.9.1 gives them the same weight-transfer "
                "socket (patches/ipc_socket.py); run them in separate commands")
    return None


#: set for jobs that share a GPU (:func:`on_gpus`): ``benchmarks/diag/shared_gpu_sleep.py``
SHARED_GPU_ENV = "OFFGRPO_SHARED_GPU_SLEEP"


def on_gpus(jobs: list, gpus: list[str] | None, run: Callable[[Any, dict[str, str]], Any],
            stagger_s: float | None = None) -> list:
    """``[run(job, env_extra) for job in jobs]``; with ``gpus``, the jobs run concurrently, each alone
    on one entry of ``gpus`` (``env_extra = {"CUDA_VISIBLE_DEVICES": entry}``: one GPU id, or several
    ids for a multi-GPU job; each job starts its own local Ray cluster), at most ``len(gpus)`` at a
    time, the first wave ``stagger_s`` apart (default :data:`ON_GPUS_STAGGER_S`). An entry listed twice
    (two jobs a GPU) adds :data:`SHARED_GPU_ENV` ``=1``. Results in the order of ``jobs``.

    n device sets run n jobs in the device time of one. Their step times are then measured under
    shared CPUs and host memory (:func:`concurrency`).
    """
    if not gpus:
        return [run(job, {}) for job in jobs]
    stagger_s = ON_GPUS_STAGGER_S if stagger_s is None else stagger_s
    free: queue.Queue[str] = queue.Queue()
    for gpu in gpus:
        free.put(gpu)

    def on_free_gpu(indexed):
        index, job = indexed
        gpu = free.get()
        if index < len(gpus):
            time.sleep(index * stagger_s)
        shared = {SHARED_GPU_ENV: "1"} if gpus.count(gpu) > 1 else {}
        try:
            return run(job, {"CUDA_VISIBLE_DEVICES": gpu, **shared})
        finally:
            free.put(gpu)

    with ThreadPoolExecutor(max_workers=len(gpus)) as pool:
        return list(pool.map(on_free_gpu, enumerate(jobs)))


def concurrency(gpu_sets: list[str] | None, n_jobs: int) -> int:
    """How many of ``n_jobs`` jobs :func:`on_gpus` runs at once on ``gpu_sets`` (1 without them): rows
    of side-by-side jobs are compared only with rows of the same concurrency."""
    return min(len(gpu_sets), n_jobs) if gpu_sets else 1


#: seconds kept back from a command's budget after a job's end: kill its group, dump stacks, save logs,
#: write the results
BUDGET_RESERVE_S = 30.0

#: seconds :func:`launch` waits, after killing a job's group, for its last processes to end before it
#: records the host's state (``host_after``)
HOST_SETTLE_S = 5.0


#: a job's run timeout when neither ``--run-timeout`` nor ``--budget-s`` is given: one 10-minute device call
DEFAULT_RUN_TIMEOUT_S = 560.0


def job_timeout(run_timeout: float | None, budget_s: float | None, t0: float, now: float,
                reserve_s: float = BUDGET_RESERVE_S, floor_s: float = 0.0) -> float:
    """``run_timeout``, cut so that the job ends ``reserve_s`` before the command's ``budget_s``
    (seconds since ``t0``, the script's start) runs out, but not below ``floor_s``: an outer
    ``timeout`` that kills the script first loses the results of the steps already run (it happened
    to a 7B run). ``run_timeout=None``: all of the budget that is left (a detached run of 837 s once
    stopped its jobs at the old fixed default of 560 s), or :data:`DEFAULT_RUN_TIMEOUT_S` without one."""
    if not budget_s:
        return DEFAULT_RUN_TIMEOUT_S if run_timeout is None else run_timeout
    left = budget_s - (now - t0) - reserve_s
    return max(floor_s, left if run_timeout is None else min(run_timeout, left))


def run_main_ppo(name: str, job_overrides: list[str], out, log_dir: Path, timeout: float, steps: int,
                 stall_s: float, mem_sample_s: float = MEM_SAMPLE_S, startup_s: float | None = None,
                 **env_extra: str) -> tuple[int, dict, Path]:
    """One ``main_ppo`` job named ``name``: fresh metrics file, :func:`launch` (memory sampled every
    ``mem_sample_s``; no logged step within ``startup_s``: stopped as stalled), logs copied to ``out``.

    Returns ``(rc, progress, jsonl)`` (see :func:`launch`; ``jsonl`` = the job's metrics file).
    """
    jsonl = log_dir / f"{name}.jsonl"
    jsonl.unlink(missing_ok=True)
    stack_dir = log_dir / f"{name}.stacks"
    env = run_env(jsonl, stack_dir=stack_dir, **env_extra)
    rc, progress = launch(main_ppo_cmd(job_overrides), env, name, log_dir, jsonl, timeout, steps, stall_s,
                          mem_sample_s=mem_sample_s, startup_s=startup_s)
    save_logs(Path(out).resolve(), name, log_dir, stack_dir)
    return rc, progress, jsonl

