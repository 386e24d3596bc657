"""What every benchmark prints with its figures: the machine it ran on."""
import os
import pathlib


def cpu_line():
    """'CPU: <model>, N cores, ISA: avx2 yes, avx512f no, amx no'."""
    model, flags = "unknown", set()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "unknown":
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    amx = sorted(f for f in flags if f.startswith("amx"))
    isa = (f"avx2 {'yes' if 'avx2' in flags else 'no'}, "
           f"avx512f {'yes' if 'avx512f' in flags else 'no'}, "
           f"amx {'/'.join(amx) if amx else 'no'}")
    return f"CPU: {model}, {os.cpu_count()} cores, ISA: {isa}"
