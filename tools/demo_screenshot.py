"""The user guide's screenshots, and a screenshot of any image with the Detect dock's points.

A tool of the source tree, not of the package: ``python tools/demo_screenshot.py --guide docs/images``
writes the user guide's screenshots (``--slide-only``: only the whole slide's, ``08-slide.png``, on a
synthetic pyramidal H&E slide), ``--image path.tif`` a screenshot of any image with its F1 against
``--truth``. The viewer helpers are the napari step of ``ivote demo`` (``ivote.napari._demo``).
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

import numpy as np

from ivote.napari._demo import _open_viewer, _run, _shoot, _summary, _wait

def _guide(folder):
    """The user guide's screenshots, on the synthetic samples (never on evaluation data)."""
    from ivote.data import sample_2d, sample_3d

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    s2 = sample_2d()
    shoot = partial(_shoot, max_width=1000)
    viewer, widget = _open_viewer(s2.image, s2.spacing, "synthetic nuclei 2D", size=(1400, 760))
    shots = [shoot(viewer, folder / "01-open.png")]
    _run(widget, 2.5, preview=True)  # dragged too small: nuclei split into several points
    shots.append(shoot(viewer, folder / "02-radius-too-small.png"))
    _run(widget, s2.radius)
    shots.append(shoot(viewer, folder / "03-run.png"))
    widget.threshold.value = widget.threshold.min  # every local maximum, background ones too
    shots.append(shoot(viewer, folder / "04-threshold.png"))
    shots.append(_measure_shot(viewer, widget, "synthetic nuclei 2D", folder / "07-measure.png", shoot))
    viewer.close()
    s3 = sample_3d()
    crop = s3.image[:, :96, :96]  # a quarter of the sample: the NumPy Run takes about 2 minutes
    viewer, widget = _open_viewer(crop, s3.spacing, "synthetic nuclei 3D", size=(1400, 760))
    viewer.dims.set_point(0, 24 * s3.spacing[0])
    _run(widget, s3.radius, preview=True)  # the slab around plane 24
    shots.append(shoot(viewer, folder / "05-3d-preview.png"))
    _run(widget, s3.radius)
    points = widget.points_layer()
    points.size = points.size / 3  # centres, not nucleus-sized balls, in the dense 3D picture
    viewer.dims.ndisplay = 3
    viewer.reset_view()
    camera = viewer.scene.camera if hasattr(viewer, "scene") else viewer.camera
    camera.angles = (5, 35, 60)  # after reset_view, which resets them
    camera.zoom *= 0.65
    shots.append(shoot(viewer, folder / "06-3d-view.png"))
    viewer.close()
    shots.append(_slide_shot(folder, shoot))
    for shot in shots:
        _summary(shot)


def _measure_shot(viewer, detect, name, path, shoot):
    """Segment from the Run's points, then Label and count with the measurements table (docks tabbed)."""
    from ivote.napari._components_widget import LabelCountWidget
    from ivote.napari._segment_widget import SegmentWidget

    detect.auto_threshold.value = True
    viewer.layers.remove(f"nuclei (preview): {name}") if f"nuclei (preview): {name}" in viewer.layers else None
    segment = SegmentWidget(viewer)
    viewer.window.add_dock_widget(segment, name="Segment nuclei", area="right", tabify=True)
    segment.run()
    _wait(segment)
    count = LabelCountWidget(viewer)
    viewer.window.add_dock_widget(count, name="Label and count", area="right", tabify=True)
    count.layer.value = viewer.layers[f"labels: {name}"]
    count.run()
    _wait(count)
    viewer.layers[f"nuclei: {name}"].visible = False
    viewer.layers[f"labels: {name}"].opacity = 0.45
    _summary(f"segment: {segment.status.value}; count: {count.status.value}")
    return shoot(viewer, path)


def _slide_shot(folder, shoot, *, blocks_shown=5):
    """A synthetic pyramidal H&E slide opened as one multiscale layer (napari-ivote's reader), caught while
    "Run in blocks (whole image)" streams each finished block's cells in as grey rings."""
    import tempfile

    from qtpy.QtWidgets import QApplication

    import napari

    from ivote.data._slide import write_synthetic_slide
    from ivote.napari._detect_layers import RUNNING_PREFIX
    from ivote.napari._detect_widget import DetectWidget
    from ivote.napari._image_io import read_image_layers

    block, mpp, radius_px = 1024, 0.5, 8
    with tempfile.TemporaryDirectory() as scratch:
        path = write_synthetic_slide(Path(scratch) / "slide.tif", (3072, 4096), tile=256, pattern=256,
                                     radius=radius_px, glass_every=0, levels=4, mpp=mpp, compression="zlib",
                                     tissue_fraction=0.5)
        viewer = napari.Viewer(show=True, title="napari-ivote: a whole slide")
        viewer.window._qt_window.resize(1400, 760)
        [(data, attributes, _)] = read_image_layers(path)  # what File > Open does with a slide (the reader's call)
        layer = viewer.add_image(data, **attributes)
        widget = DetectWidget(viewer)
        widget.live.value = False
        viewer.window.add_dock_widget(widget, name="Detect nuclei", area="right")
        widget.image.value = layer
        widget.radius.value = radius_px * mpp  # micrometres
        viewer.reset_view()
        viewer.camera.zoom *= 6  # about 700 pixels of the slide across: the rings readable
        widget.volume.run(chunks=(block, block))
        running = RUNNING_PREFIX + layer.name

        def blocks_streamed() -> int:
            if running not in viewer.layers or not len(viewer.layers[running].data):
                return 0
            return len(np.unique(np.asarray(viewer.layers[running].data) // block, axis=0))

        while widget.busy and blocks_streamed() < blocks_shown:  # caught half-way: some blocks in, some to come
            QApplication.processEvents()
            time.sleep(0.005)
        _summary(f"slide: {len(layer.data)} levels {[tuple(level.shape[:2]) for level in layer.data]}, "
                 f"{len(viewer.layers[running].data) if running in viewer.layers else 0} cells streamed from "
                 f"{blocks_streamed()} blocks so far")
        if running in viewer.layers:
            viewer.camera.center = _seam(np.asarray(viewer.layers[running].data) // block, layer.data[0].shape,
                                         block, mpp)
        shot = shoot(viewer, folder / "08-slide.png")
        _wait(widget)
        _summary(f"slide: {widget.status.value}")
        viewer.close()
    return shot


def _seam(streamed_blocks, shape, block, mpp) -> tuple:
    """World centre of the seam between a block whose cells are in and a neighbour still to come, the
    pair nearest the slide's centre (tissue there, not glass)."""
    done = {tuple(b) for b in np.asarray(streamed_blocks, dtype=int)}
    rows, cols = -(-shape[0] // block), -(-shape[1] // block)
    seams = [((r + 0.5 + 0.5 * dr) * block, (c + 0.5 + 0.5 * dc) * block)  # the shared edge's middle
             for r, c in done for dr, dc in ((0, 1), (1, 0))
             if r + dr < rows and c + dc < cols and (r + dr, c + dc) not in done]
    if not seams:
        return (shape[0] / 2 * mpp, shape[1] / 2 * mpp)
    y, x = min(seams, key=lambda p: (p[0] - shape[0] / 2) ** 2 + (p[1] - shape[1] / 2) ** 2)
    return (y * mpp, x * mpp)


def _any_image(path, out, radius, polarity, truth=None):
    from ivote.io import read_image

    image, spacing = read_image(path)
    spatial = image.ndim - 1 if image.ndim == 3 and image.shape[-1] in (3, 4) else image.ndim
    units = "um" if spacing else "pixel"
    spacing = spacing or (1.0,) * spatial
    viewer, widget = _open_viewer(image, spacing, Path(path).stem, polarity=polarity, units=units)
    result = _run(widget, radius)
    viewer.reset_view()
    if truth and result:
        from ivote.metrics import match_points

        centres = np.loadtxt(truth, delimiter=",", skiprows=1, ndmin=2).reshape(-1, len(spacing))
        match = match_points(widget.points_layer().data, centres, tolerance=0.5 * radius / min(spacing), spacing=None)
        _summary(f"vs {len(centres)} true centres: precision {match.precision:.3f}, recall {match.recall:.3f}, "
                 f"F1 {match.f1:.3f} (tolerance r/2)")
    _summary(f"{widget.status.value}; screenshot -> {_shoot(viewer, out)}")
    viewer.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="napari screenshots of the Detect nuclei widget")
    parser.add_argument("--guide", help="write the user guide's screenshots into this folder")
    parser.add_argument("--slide-only", action="store_true", help="with --guide: only the whole-slide screenshot")
    parser.add_argument("--image", help="any TIFF/PNG image")
    parser.add_argument("--radius", type=float, default=6.0, help="radius for --image, in its units")
    parser.add_argument("--polarity", default="bright")
    parser.add_argument("--truth", help="CSV of true centres (pixels) for --image: prints the F1")
    parser.add_argument("--out", default="napari_detect.png")
    args = parser.parse_args(argv)
    if args.guide and args.slide_only:
        Path(args.guide).mkdir(parents=True, exist_ok=True)
        _summary(_slide_shot(Path(args.guide), partial(_shoot, max_width=1000)))
    elif args.guide:
        _guide(args.guide)
    elif args.image:
        _any_image(args.image, args.out, args.radius, args.polarity, args.truth)
    else:
        parser.error("give --guide or --image")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
