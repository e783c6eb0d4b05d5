"""Profile one 3D detection's voting passes under Nsight Compute.

    ncu --profile-from-start off --clock-control none -k regex:ivote_ python benchmarks/profile_vote_gpu.py [SIZE] [RADIUS]

The detection runs once unprofiled (kernel compilation, tables, the GPU's clocks),
then once between ``cudaProfilerStart``/``Stop``, on the synthetic nuclei of
``bench_detect`` (a 256³ tile, repeated).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_detect import make_image  # noqa: E402

from ivote._backend import default_xp, to_device  # noqa: E402
from ivote.detect import iterative_voting  # noqa: E402


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 256
    radius = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
    xp = default_xp()
    image = to_device(make_image(3, size, radius).astype("float32"), xp)
    iterative_voting(image, radius=radius)
    xp.cuda.runtime.deviceSynchronize()
    xp.cuda.runtime.profilerStart()
    found = iterative_voting(image, radius=radius)
    xp.cuda.runtime.deviceSynchronize()
    xp.cuda.runtime.profilerStop()
    print(f"{size}³ r {radius:g}: {len(found.points)} cells, {found.n_passes} passes")


if __name__ == "__main__":
    main()
