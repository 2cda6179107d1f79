"""Code of a change to the loop around the DataLoader, not to its call: a loader made
again each epoch, made once."""

from __future__ import annotations

from .code import LoaderSpec, assign, loader_call


def made_once(spec: LoaderSpec) -> str:
    """``# before``: the loop that makes ``spec``'s DataLoader again each epoch; ``# after``:
    the loop that makes it once, before the epochs, with persistent workers (a new
    DataLoader starts its workers whatever ``persistent_workers`` says)."""
    before = spec.config()
    after = before.replace(persistent_workers=True)

    def loop(*make: str) -> list[str]:
        return ["for epoch in range(epochs):", *make, f"    for batch in {spec.name}:",
                "        ..."]

    return "\n".join([
        "# before: a new DataLoader each epoch starts its workers again each epoch",
        *loop(loader_call(spec, before, prefix="    " + assign(spec))),
        "# after: one DataLoader, made before the epochs, keeps its workers between them",
        loader_call(spec, after, show=["persistent_workers"], prefix=assign(spec)), *loop()])
