"""Whether ``--nodes-label`` names machines. A label that names GPUs (``gpu``: every machine's first GPU is
``0``), or one coarser than a machine (``job``, a model name), put several machines' GPU series under one
value: the export added their power up as one node's, its memory and power channels null (their series
carry no GPU label), and exited 0. Each such label is refused in one line that says which to give."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sparkwatch.sources import SourceError
from sparkwatch.sources.prometheus.align import first_overlap
from sparkwatch.sources.prometheus.mappings import Family
from sparkwatch.sources.prometheus.raw import RawSeries


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
    """The GPU power series of one value of the nodes label are one machine's: no two values of the
    exporter's own machine label, and no GPU index under two GPU ids, with samples at once. One after the
    other is one machine whose labels changed (a dcgm-exporter pod recreated under a new Hostname, an agent
    renamed, a GPU replaced or renumbered after a reboot), as two label sets of one series are. (MIG
    instances share their GPU's id and index: they are told apart, or refused, where the series are.)"""
    host = family.host_label
    if host is not None and host != label:
        hosts = _at_once(_grouped(power, host))
        if hosts is not None:
            raise SourceError(
                f"--nodes-label {label}: {label}={node!r} holds the GPU power series of several machines"
                f" at once by their {host} label ({hosts[0]}, {hosts[1]}), measured as one node;"
                f" {_give(family)}"
            )
    index = family.index_label
    if index is None:
        return
    for at, gpus in _grouped(power, index).items():
        ids = _at_once(_grouped(gpus, family.gpu_label))
        if ids is not None:
            raise SourceError(
                f"--nodes-label {label}: {label}={node!r} holds GPUs {ids[0]} and {ids[1]}"
                f" ({family.gpu_label}) with {index}={at!r} at once: several machines' GPUs measured as one"
                f" node; {_give(family)}"
            )


def _grouped(series: Sequence[RawSeries], label: str) -> dict[str, list[RawSeries]]:
    """The series with samples by their value of ``label`` (those without it left out)."""
    out: dict[str, list[RawSeries]] = {}
    for r in series:
        if (value := r.labels.get(label)) and len(r.t_ns):
            out.setdefault(value, []).append(r)
    return out


def _at_once(groups: dict[str, list[RawSeries]]) -> tuple[str, str] | None:
    """Two groups with samples over the same time (each group's stamps taken together, split at its gaps as
    a track is), or None where they follow one another."""
    if len(groups) < 2:
        return None
    joined = [
        RawSeries({"key": key}, np.unique(np.concatenate([r.t_ns for r in parts])), np.empty(0))
        for key, parts in sorted(groups.items())
    ]
    pair = first_overlap(joined)
    return None if pair is None else (pair[0]["key"], pair[1]["key"])


def _give(family: Family) -> str:
    named = f"{family.host_label} (the exporter's), or " if family.host_label else ""
    return f"give the label that names each machine: {named}instance (the scrape target's)"
