"""What one GPU call costs besides its time: the launches the host issues, the peak memory it allocates, whether it
waits for the host, and its time when replayed from a CUDA graph. Each helper takes a call of no arguments (a
``timing.timed_call``) that has already run once, so that lazy initialisation is not counted."""

from __future__ import annotations

from typing import Callable

import torch

from benchmarks.timing import time_interleaved

LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaGraphLaunch", "cudaLaunchKernelExC", "cuLaunchKernelEx")


def launches_per_call(call: Callable[[], object]) -> int:
    """Kernel and graph launches the host issues in one ``call`` (after a warm-up call), from the profiler's record of
    the CUDA runtime's launch calls (memsets and copies are not launches and are not counted)."""
    return launch_profile(call)[0]


def launch_profile(call: Callable[[], object]) -> tuple[int, dict[str, int]]:
    """:func:`launches_per_call`'s count, and the kernels those launches ran in one ``call``, by name (cut to 90
    characters), with their counts: where a contender's launches go."""
    call()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as profile:
        call()
        torch.cuda.synchronize()
    events = profile.key_averages()
    launches = sum(event.count for event in events if event.key in LAUNCH_CALLS)
    kernels: dict[str, int] = {}
    for event in events:
        if event.device_type == torch.autograd.DeviceType.CUDA:
            name = event.key[:90]
            kernels[name] = kernels.get(name, 0) + event.count
    return launches, kernels


def peak_memory_mib(call: Callable[[], object]) -> float:
    """MiB allocated at the peak of one ``call`` above what was allocated before it."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2 ** 20


def host_sync(call: Callable[[], object]) -> str | None:
    """None when ``call`` never waits for the host (``torch.cuda.set_sync_debug_mode("error")`` raises at any
    synchronising call); else the first line of that error, which names the call."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        call()
    except RuntimeError as error:
        return str(error).strip().splitlines()[0][:200]
    finally:
        torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    return None


def graph_replay_seconds(call: Callable[[], object], **timing) -> float:
    """Median seconds of one replay of ``call`` captured in a CUDA graph (warmed up on a side stream first, as
    torch.cuda.graph requires). Raises what the capture raises; a call that waits for the host cannot be captured,
    so check :func:`host_sync` first (a failed capture can leave the CUDA context unusable)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    [seconds] = time_interleaved([graph.replay], synchronize=torch.cuda.synchronize, **timing)
    return seconds
