"""On-demand benchmarks (``python -m tests.benchmarks.<name>``), not part of the test suite."""


def peak_rss_kib() -> int:
    """This process's peak resident memory in KiB.

    The kernel's ``VmHWM``, which starts afresh when a process runs a new program; ``ru_maxrss`` keeps
    the size of the parent the process was forked from (a benchmark that has decoded 2M rows and then
    measures a fresh ``statelens`` process would report its own memory), so it is only the fallback
    where ``/proc`` is missing.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
