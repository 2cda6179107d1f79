"""The TensorBoard plugin: the "diagnose" tab (``base_plugin.TBPlugin`` + its loader).

Registered by the ``tensorboard`` extra::

    [project.entry-points."tensorboard_plugins"]
    diagnose = "diagnose.report.tb_plugin.plugin:DiagnoseLoader"

Routes, under ``/data/plugin/diagnose``:

=============  ==========================================================================
``/index.js``  the tab: an ES module whose ``render()`` TensorBoard calls in its frame
``/tab.css``   its style (the HTML report's, plus the tab's layout)
``/index.html`` the same tab as a page of its own
``/runs``      ``[{"run", "worst", "counts", "alarms", "step_time", "headline"} | {"run",
               "error"}]``; a watched run's worst and counts are its alarms' (else
               ``alarms`` is null)
``/run``       ``?run=NAME``: the run as :func:`.view.run_view` gives it, or ``{"run", "error"}``
``/plot``      ``?run=NAME&name=KEY``: one plot, ``image/svg+xml``
=============  ==========================================================================

Runs are the folders under the log dir that hold a ``diagnose.json``; a run name is only
ever looked up among them (never joined to a path). The plugin is active only when there is
at least one.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from ..markup import CSS
from .runfile import RunFileError, find_runs, read_run_file
from .view import plot_svg, run_summary, run_view

PLUGIN_NAME = "diagnose"
STATIC = Path(__file__).resolve().parent / "static"
_RESCAN_S = 5.0  # how long a listing of the log dir is reused
_PROFILER_PLUGIN = "pytorch_profiler"

_Doc = tuple[tuple[int, int], dict[str, Any] | RunFileError]


class DiagnosePlugin(base_plugin.TBPlugin):
    """Lists the log dir's diagnose runs and serves the tab that shows them."""

    plugin_name = PLUGIN_NAME

    def __init__(self, context: base_plugin.TBContext) -> None:
        logdir = context.logdir or getattr(context.flags, "logdir", None) or ""
        # a local folder only (not gs://..., not a --logdir_spec of several)
        self._logdir = Path(logdir) if logdir and "://" not in logdir else None
        self._context = context
        self._lock = threading.Lock()
        self._runs: dict[str, Path] = {}
        self._scanned = -_RESCAN_S
        self._docs: dict[Path, _Doc] = {}

    # ------------------------------------------------------------------ TBPlugin
    def get_plugin_apps(self) -> dict[str, Any]:
        return {
            "/index.js": self._static("index.js", "text/javascript"),
            "/tab.css": self._serve_css,
            "/index.html": self._static("index.html", "text/html"),
            "/runs": self._serve_runs,
            "/run": self._serve_run,
            "/plot": self._serve_plot,
        }

    def is_active(self) -> bool:
        return bool(self.runs())

    def frontend_metadata(self) -> base_plugin.FrontendMetadata:
        return base_plugin.FrontendMetadata(es_module_path="/index.js", tab_name="Diagnose")

    # -------------------------------------------------------------------- data
    def runs(self, *, fresh: bool = False) -> dict[str, Path]:
        """Run name -> folder, rescanned at most every few seconds (or when ``fresh``)."""
        if self._logdir is None:
            return {}
        with self._lock:
            now = time.monotonic()
            if fresh or now - self._scanned >= _RESCAN_S:
                self._runs = find_runs(self._logdir) if self._logdir.is_dir() else {}
                self._scanned = now
            return dict(self._runs)

    def document(self, run_dir: Path) -> dict[str, Any]:
        """The run's ``diagnose.json``, read again only when the file changed."""
        try:
            st = (run_dir / "diagnose.json").stat()
            key = (st.st_mtime_ns, st.st_size)
        except OSError:
            key = (-1, -1)
        with self._lock:
            hit = self._docs.get(run_dir)
        if hit is None or hit[0] != key:
            try:
                doc: dict[str, Any] | RunFileError = read_run_file(run_dir)
            except RunFileError as e:
                doc = e
            hit = (key, doc)
            with self._lock:
                self._docs[run_dir] = hit
        if isinstance(hit[1], RunFileError):
            raise hit[1]
        return hit[1]

    def _profiler_tab(self) -> bool:
        plugins = self._context.plugin_name_to_instance or {}
        return _PROFILER_PLUGIN in plugins

    def _lookup(self, name: str | None) -> Path | None:
        if not name:
            return None
        return self.runs().get(name) or self.runs(fresh=True).get(name)

    # ------------------------------------------------------------------ routes
    def _static(self, name: str, content_type: str) -> Any:
        @wrappers.Request.application
        def serve(request: wrappers.Request) -> wrappers.Response:
            return http_util.Respond(request, (STATIC / name).read_bytes(), content_type)

        return serve

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug types it for functions
    def _serve_css(self, request: wrappers.Request) -> wrappers.Response:
        css = CSS + (STATIC / "tab.css").read_text(encoding="utf-8")
        return http_util.Respond(request, css, "text/css")

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug types it for functions
    def _serve_runs(self, request: wrappers.Request) -> wrappers.Response:
        out = []
        for name, run_dir in self.runs().items():
            try:
                out.append(run_summary(name, self.document(run_dir)))
            except RunFileError as e:
                out.append({"run": name, "error": str(e)})
        return http_util.Respond(request, out, "application/json")

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug types it for functions
    def _serve_run(self, request: wrappers.Request) -> wrappers.Response:
        name = request.args.get("run")
        run_dir = self._lookup(name)
        if run_dir is None:
            return http_util.Respond(request, {"run": name, "error": f"no diagnose run named "
                                               f"{name!r} in this log dir"},
                                     "application/json", code=404)
        try:
            body = run_view(str(name), self.document(run_dir), profiler_tab=self._profiler_tab())
        except RunFileError as e:
            body = {"run": name, "error": str(e)}
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            body = {"run": name, "error": f"diagnose.json holds something this torch-diagnose "
                                          f"cannot show ({type(e).__name__}: {e})"}
        return http_util.Respond(request, body, "application/json")

    @wrappers.Request.application  # type: ignore[arg-type]  # werkzeug types it for functions
    def _serve_plot(self, request: wrappers.Request) -> wrappers.Response:
        run_dir = self._lookup(request.args.get("run"))
        svg = None
        if run_dir is not None:
            try:
                svg = plot_svg(self.document(run_dir), request.args.get("name")
                               or request.args.get("key", ""))  # the run view says key
            except RunFileError:
                svg = None
        if svg is None:
            return http_util.Respond(request, "no such plot", "text/plain", code=404)
        return http_util.Respond(request, svg, "image/svg+xml")


class DiagnoseLoader(base_plugin.TBLoader):
    """The entry point's object: makes the plugin for TensorBoard's context."""

    def load(self, context: base_plugin.TBContext) -> DiagnosePlugin:
        return DiagnosePlugin(context)
