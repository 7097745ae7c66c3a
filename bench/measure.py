"""Timing and peak memory of a command's whole process tree, sampled from /proc.

What is measured, exactly:
- wall: seconds from spawning the command to its exit (interpreter start-up included);
- peak_pss_mb: the highest sum, over the command and all its descendants alive at that moment,
  of PSS (proportional set size, /proc/PID/smaps_rollup): pages shared between processes (the
  forkserver's preloaded modules, copy-on-write) are split among them, so the sum is the memory
  the tree really occupies. Sampled every `interval` seconds, so a spike shorter than that can
  be missed;
- peak_rss_sum_mb: the same sum with RSS, which counts shared pages once per process (an upper
  bound);
- hwm_sum_mb: the sum over every process of the tree of its own RSS high-water mark (VmHWM,
  kept by the kernel, so no spike is missed while the process is sampled at least once): an
  upper bound of the tree's peak that does not depend on the sampling interval;
- cpu_s: user + system CPU seconds of the whole tree: for every process seen, the last utime +
  stime read from /proc/PID/stat (so up to one interval of each process's end is missed). Other
  load on the machine inflates it much less than it inflates wall time;
- max_rss_single_mb: the kernel's exact high-water mark of the largest single process of the
  tree (getrusage RUSAGE_CHILDREN ru_maxrss, which covers descendants that were waited for).
"""

from __future__ import annotations

import os
import resource
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Measured:
    wall: float
    cpu_s: float
    returncode: int
    peak_pss_mb: float
    peak_rss_sum_mb: float
    hwm_sum_mb: float
    max_rss_single_mb: float
    stdout: str
    stderr: str


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def _descendants(pid: int) -> list[int]:
    tree = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(tree.get(p, []))
    return out


def _ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def _kb(path: str, field: str) -> int:
    return _kbs(path, (field,))[0]


def _kbs(path: str, fields: tuple[str, ...]) -> list[int]:
    """The kB values of `fields` in a /proc status-like file (0 for each one missing)."""
    out = dict.fromkeys(fields, 0)
    try:
        with open(path) as fh:
            for line in fh:
                for field in fields:
                    if line.startswith(field):
                        out[field] = int(line.split()[1])
    except OSError:
        pass
    return [out[f] for f in fields]


def cpu_seconds(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


# Sampling costs CPU on the machine it measures: every 50 ms (the interval used until
# 2026-12-04) the sampler took 1.0-1.9 CPU s of a 5-9 s ingest on 2 cores and lengthened its wall
# time by 0.7-2.2 s (3 A/B pairs against 0.5 s), and it slowed a Spark build's JVM by ~20%.
# At 0.25 s it costs about a fifth of that; hwm_sum_mb bounds the peak whatever the interval.
INTERVAL_S = 0.25


def run_measured(
    cmd: list[str], *, interval: float = INTERVAL_S, env: dict[str, str] | None = None
) -> Measured:
    usage_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    before = usage_before.ru_maxrss
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak_pss = peak_rss = 0
    cpu_ticks: dict[int, int] = {}
    hwm: dict[int, int] = {}
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak_pss, peak_rss
        while not stop.is_set():
            pids = _descendants(proc.pid)
            for p in pids:
                cpu_ticks[p] = max(cpu_ticks.get(p, 0), _ticks(p))
            pss = sum(_kb(f"/proc/{p}/smaps_rollup", "Pss:") for p in pids)
            rss = 0
            for p in pids:
                now, high = _kbs(f"/proc/{p}/status", ("VmRSS:", "VmHWM:"))
                rss += now
                hwm[p] = max(hwm.get(p, 0), high)
            peak_pss, peak_rss = max(peak_pss, pss), max(peak_rss, rss)
            stop.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    stop.set()
    sampler.join()
    usage_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    after = usage_after.ru_maxrss
    # The command itself was waited for, so its own total is exact; descendants from /proc.
    own = cpu_seconds(usage_after) - cpu_seconds(usage_before)
    others = sum(t for p, t in cpu_ticks.items() if p != proc.pid) / os.sysconf("SC_CLK_TCK")
    return Measured(
        wall=wall,
        cpu_s=own + others,
        returncode=proc.returncode,
        peak_pss_mb=peak_pss / 1024,
        peak_rss_sum_mb=peak_rss / 1024,
        hwm_sum_mb=sum(hwm.values()) / 1024,
        # ru_maxrss is a high-water mark over all waited-for children so far: only meaningful
        # when this command's tree set a new maximum.
        max_rss_single_mb=(after / 1024) if after > before else float("nan"),
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
    )
