"""Whether ``--nodes-label`` names machines. A label that names GPUs (``gpu``: every machine's first GPU is
``0``), or one coarser than a machine (``job``, a model name), put several machines' GPU series under one
value: the export added their power up as one node's, its memory and power channels null (their series
carry no GPU label), and exited 0. Each such label is refused in one line that says which to give."""

from __future__ import annotations

from collections.abc import Sequence

from sparkwatch.sources import SourceError
from sparkwatch.sources.prometheus.mappings import Family
from sparkwatch.sources.prometheus.raw import RawSeries

#: The most values a refusal names.
SHOWN = 4


def check_nodes_label(family: Family, label: str) -> None:
    """A label the family puts on each GPU (its id, index or model name) is no nodes label."""
    gpu_labels = {family.gpu_label: "id", family.index_label: "index", family.name_label: "model name"}
    what = gpu_labels.get(label)
    if what is not None:
        raise SourceError(
            f"--nodes-label {label}: that is the {family.name} family's GPU {what} label, not a machine's"
            f" (it would take several machines' GPUs for one node); {_give(family)}"
        )


def check_one_machine(family: Family, label: str, node: str, power: Sequence[RawSeries]) -> None:
    """The GPU power series of one value of the nodes label come from one machine: they carry one value of
    the exporter's own machine label, and no GPU index twice (two machines' GPU 0)."""
    host = family.host_label
    if host is not None and host != label:
        hosts = sorted({v for r in power if (v := r.labels.get(host))})
        if len(hosts) > 1:
            raise SourceError(
                f"--nodes-label {label}: {label}={node!r} holds the GPU power series of {len(hosts)} machines"
                f" by their {host} label ({_shown(hosts)}), measured as one node; {_give(family)}"
            )
    index = family.index_label
    if index is None:
        return
    gpus: dict[str, set[str]] = {}
    for r in power:
        if (at := r.labels.get(index)) is not None:
            gpus.setdefault(at, set()).add(r.labels.get(family.gpu_label, ""))
    twice = sorted(at for at, ids in gpus.items() if len(ids) > 1)
    if twice:
        ids = sorted(gpus[twice[0]])
        raise SourceError(
            f"--nodes-label {label}: {label}={node!r} holds {len(ids)} GPUs with {index}={twice[0]!r}"
            f" ({family.gpu_label} {_shown(ids)}): several machines' GPUs measured as one node;"
            f" {_give(family)}"
        )


def _give(family: Family) -> str:
    named = f"{family.host_label} (the exporter's), or " if family.host_label else ""
    return f"give the label that names each machine: {named}instance (the scrape target's)"


def _shown(values: Sequence[str]) -> str:
    return ", ".join(values[:SHOWN]) + (", …" if len(values) > SHOWN else "")
