"""The "diagnose" tab in TensorBoard: each run's diagnosis, served by TensorBoard itself.

``torch-diagnose tensorboard`` and ``diagnose(..., tensorboard=...)`` write, next to the
event files of each run, ``diagnose.json`` (:mod:`.runfile`): the Report's JSON, the autofix
rows when there are any, and the plots as SVG (drawn by :mod:`diagnose.report.plots` when
the run is written). The plugin (:mod:`.plugin`, registered through the
``tensorboard_plugins`` entry point of the ``tensorboard`` extra) lists the runs that have
one and serves the tab: ``static/index.js`` (an ES module TensorBoard loads in its plugin
frame), ``static/tab.css`` and a stand-alone ``static/index.html``. Nothing is loaded from
anywhere but the TensorBoard server, so the tab works without internet.

Text from traces (kernel and device names, messages that quote them) is untrusted: the
script only ever sets it as text (``textContent``), and the plots are shown as ``<img>``
(an SVG in an image runs no script and loads nothing).

This package imports TensorBoard only in :mod:`.plugin`; :mod:`.runfile` needs none.
"""
