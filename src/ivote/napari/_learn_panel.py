"""The Detect widget's "Learn from my corrections" panel: learn a detector from the edited nuclei layer, save
and load it. The math is in :mod:`ivote.learn`; Run, Run on folder and the preview use the panel's
``detector``."""

from __future__ import annotations

from pathlib import Path

from magicgui.widgets import Container, PushButton

from ._runner import Runner

_LEARN_TIP = ("Edit the nuclei layer of a Run first (delete false points, add missed nuclei with napari's Points "
              "tools), then learn: every candidate of the image is scored by what the corrections teach, and "
              "Run, Run on folder and the preview use the model. Learning again on another image adds to it.")


class LearnPanel(Container):
    """Learn / Save / Load / Forget in one row (the dock stays short); what the model is goes to the status
    line and the Learn button's tooltip (:attr:`description`)."""

    def __init__(self, detect_widget):
        self.detect_widget = detect_widget
        self.detector = None
        """The :class:`ivote.learn.LearnedDetector` in use, or None."""
        self._base = None  # the model before the current image's corrections (re-learning replaces them)
        self._base_image = None
        self._cache = {}  # image layer id -> (settings, detections with every candidate and the vote field)
        self.learn_button = PushButton(text="Learn from my corrections", tooltip=_LEARN_TIP)
        self.save_button = PushButton(text="Save…", enabled=False, tooltip="Save the model as JSON.")
        self.load_button = PushButton(text="Load…", tooltip="Load a model saved here or by 'ivote learn'.")
        self.forget_button = PushButton(text="Forget", enabled=False, tooltip="Detect without the model again.")
        self.description = _describe(None)
        self.toggle = PushButton(text="Learn…", tooltip="Show the panel that learns from your corrections of the "
                                 "nuclei layer, and saves and loads the model.")
        self.toggle.changed.connect(lambda: setattr(self, "visible", not self.visible))
        super().__init__(widgets=[self.learn_button, self.save_button, self.load_button, self.forget_button],
                         layout="horizontal", labels=False)
        self.runner = None
        self.learn_button.changed.connect(lambda: self.learn())
        self.save_button.changed.connect(lambda: self.save())
        self.load_button.changed.connect(lambda: self.load())
        self.forget_button.changed.connect(lambda: self.set_detector(None))

    def attach(self):
        widget = self.detect_widget
        self.runner = Runner(widget.viewer, widget.native, widget.status.show)

    @property
    def busy(self) -> bool:
        return self.runner is not None and self.runner.busy

    def set_detector(self, detector, note: str | None = None):
        self.detector = detector
        if detector is None:
            self._base = self._base_image = None
        self.save_button.enabled = self.forget_button.enabled = detector is not None
        self.description = note or _describe(detector)
        self.learn_button.tooltip = f"{_LEARN_TIP}\n\nNow: {self.description}."
        self.detect_widget._schedule_preview()

    # -- learning -----------------------------------------------------------------------------
    def learn(self):
        """Learn from the edited nuclei layer of the current Run, then show the re-scored points."""
        from ._learn_logic import learning_inputs

        widget = self.detect_widget
        inputs = learning_inputs(widget, self._cache)
        if isinstance(inputs, str):
            return widget.status.show(inputs, error=True)
        shown, corrected = inputs
        base = self._base if shown.image is self._base_image else self.detector
        cache = self._cache

        def work(job):
            from ._learn_logic import learn_and_rescore

            return learn_and_rescore(shown, corrected, base, cache)

        def done(outcome):
            if isinstance(outcome, str):
                return widget.status.show(outcome, error=True)
            detector, result, changes = outcome
            self._base, self._base_image = base, shown.image
            self.set_detector(detector)
            from . import _detect_layers as layers

            widget._show(layers.Shown(result=result, image=shown.image, geometry=shown.geometry,
                                      timelapse=False, preview=False, radius_estimate=shown.radius_estimate))
            widget.status.show(changes)

        widget.status.show("learning from the corrections…")
        self.runner.start(work, done, desc="Learning from the corrections", inputs=(shown.image,))

    # -- files --------------------------------------------------------------------------------
    def save(self, path: str | None = None):
        if self.detector is None:
            return self.detect_widget.status.show("No model to save: learn from corrections first.", error=True)
        path = path or _ask_path(self.native, save=True)
        if path:
            written = self.detector.save(Path(path).with_suffix(".json") if not str(path).endswith(".json") else path)
            self.detect_widget.status.show(f"model saved to {written}")

    def load(self, path: str | None = None):
        from ..errors import IvoteError
        from ..learn import load_detector

        path = path or _ask_path(self.native, save=False)
        if not path:
            return
        try:
            detector = load_detector(path)
        except (IvoteError, OSError) as exc:
            return self.detect_widget.status.show(str(exc), error=True)
        self.set_detector(detector)
        self.detect_widget.status.show(f"model loaded from {path}: {self.description}")


def _describe(detector) -> str:
    if detector is None:
        return "no model: the default threshold"
    nuclei = int(detector.labels.sum())
    decision = ("keeps the default threshold's points" if detector.decision == "default"
                else f"probability ≥ {detector.threshold:.2f}")
    return (f"model from {detector.n_images} image(s), {nuclei} nuclei / {detector.n_samples - nuclei} others: "
            f"{decision}")


def _ask_path(parent, *, save: bool) -> str | None:
    from qtpy.QtWidgets import QFileDialog

    ask = QFileDialog.getSaveFileName if save else QFileDialog.getOpenFileName
    path, _ = ask(parent, "Detector model", "detector.json", "Detector model (*.json)")
    return path or None
