"""Where the corpus' jobs come from: the committed corpus (benchmarks/corpus) and, where
$TORCH_DIAGNOSE_CORPUS names a folder holding another corpus package (the same
``names``/``half``/``split``/``make`` functions), that one too, under the labels ``repo``
and ``extra``. Job names must not clash.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # `import corpus`

#: the committed corpus (benchmarks/corpus)
COMMITTED = HERE / "corpus"
#: the module name the other corpus' package is loaded under (its own is ``corpus`` too)
EXTRA_MODULE = "corpus_extra"


class CorpusError(Exception):
    """A corpus that cannot be used: one line for the user."""


def corpus_dir() -> Path | None:
    """The other corpus: $TORCH_DIAGNOSE_CORPUS; None where it is not set. A folder that
    it names but that holds no corpus package is an error."""
    env = os.environ.get("TORCH_DIAGNOSE_CORPUS")
    if not env:
        return None
    d = Path(env).expanduser()
    if not (d / "__init__.py").is_file():
        raise CorpusError(f"TORCH_DIAGNOSE_CORPUS={env}: no corpus package there "
                          "(no __init__.py)")
    d = d.resolve()
    return None if d == COMMITTED.resolve() else d


def _load_extra(d: Path) -> Any:
    """The other corpus' package, under :data:`EXTRA_MODULE`."""
    if EXTRA_MODULE in sys.modules:
        return sys.modules[EXTRA_MODULE]
    spec = importlib.util.spec_from_file_location(EXTRA_MODULE, d / "__init__.py",
                                                  submodule_search_locations=[str(d)])
    if spec is None or spec.loader is None:
        raise CorpusError(f"{d}: cannot load its __init__.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[EXTRA_MODULE] = mod
    spec.loader.exec_module(mod)
    for fn in ("names", "half", "make"):
        if not callable(getattr(mod, fn, None)):
            raise CorpusError(f"{d}: its __init__.py has no {fn}() (not a corpus package)")
    return mod


@dataclass
class Corpora:
    """Every corpus in use, by label (``repo``, ``extra``), and which holds each job."""
    packages: dict[str, Any]
    where: dict[str, str]  # job name -> label

    def names(self) -> list[str]:
        return sorted(self.where)

    def package(self, name: str) -> Any:
        return self.packages[self.where[name]]

    def half(self, name: str) -> str:
        return str(self.package(name).half(name))

    def make(self, name: str, **kwargs: Any) -> dict[str, Any]:
        return dict(self.package(name).make(name, **kwargs))

    def split(self, jobs: list[str] | None = None) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {"tune": [], "validate": []}
        for name in jobs if jobs is not None else self.names():
            out[self.half(name)].append(name)
        return out


_CORPORA: Corpora | None = None


def load_corpora() -> Corpora:
    """The committed corpus, and the other one where there is one (loaded once)."""
    global _CORPORA
    if _CORPORA is None:
        import corpus

        packages = {"repo": corpus}
        d = corpus_dir()
        if d is not None:
            packages["extra"] = _load_extra(d)
        where: dict[str, str] = {}
        for label, pkg in packages.items():
            for name in pkg.names():
                if name in where:
                    raise CorpusError(f"job {name} is in both corpora ({where[name]} and "
                                      f"{label}): rename one")
                where[name] = label
        _CORPORA = Corpora(packages, where)
    return _CORPORA


def load_corpus() -> Corpora:
    """Every corpus in use, as one (``names``, ``half``, ``split``, ``make``); exits 2 with
    one line where the other corpus cannot be used."""
    try:
        return load_corpora()
    except CorpusError as e:
        print(f"{Path(sys.argv[0]).stem}: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def make(name: str) -> dict[str, Any]:
    """A fresh job from whichever corpus holds it, its construction's prints kept out of
    the table."""
    with contextlib.redirect_stdout(io.StringIO()):
        return load_corpora().package(name).make(name)
