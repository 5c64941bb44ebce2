"""The remote-write 1.0 body: a ``prometheus.WriteRequest`` serialised by the protobuf library and
compressed by cramjam's snappy (block format: receivers refuse the framed one with 400).

The four messages are declared here as a descriptor (field names, numbers and types as in Prometheus'
prompb/remote.proto and prompb/types.proto) and turned into classes by the library's message factory,
rather than committing protoc's ``_pb2`` output: generated code is tied to the protobuf runtime it was made
for (it checks the version at import), and the upstream .proto imports gogoproto, which we would have to
strip anyway. A private pool keeps these names out of the default one that other libraries fill.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cramjam
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from sparkwatch.coordinator.remote_write.series import Key

_F = descriptor_pb2.FieldDescriptorProto
#: (message, [(field, number, type, label, message type)]), as in prompb (remote.proto, types.proto).
_MESSAGES: tuple[tuple[str, tuple[tuple[str, int, int, int, str], ...]], ...] = (
    (
        "Sample",
        (
            ("value", 1, _F.TYPE_DOUBLE, _F.LABEL_OPTIONAL, ""),
            ("timestamp", 2, _F.TYPE_INT64, _F.LABEL_OPTIONAL, ""),
        ),
    ),
    (
        "Label",
        (
            ("name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
            ("value", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, ""),
        ),
    ),
    (
        "TimeSeries",
        (
            ("labels", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".prometheus.Label"),
            ("samples", 2, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".prometheus.Sample"),
        ),
    ),
    ("WriteRequest", (("timeseries", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, ".prometheus.TimeSeries"),)),
)

#: The headers every write carries (the remote-write 1.0 specification).
HEADERS = {
    "Content-Encoding": "snappy",
    "Content-Type": "application/x-protobuf",
    "X-Prometheus-Remote-Write-Version": "0.1.0",
}


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="sparkwatch/prompb_remote_write.proto", package="prometheus", syntax="proto3"
    )
    for name, fields in _MESSAGES:
        message = proto.message_type.add(name=name)
        for field, number, kind, label, type_name in fields:
            added = message.field.add(name=field, number=number, type=kind, label=label)
            if type_name:
                added.type_name = type_name
    return proto


class Messages:
    """The message classes (built once per writer: a few hundred microseconds)."""

    def __init__(self) -> None:
        pool = descriptor_pool.DescriptorPool()
        pool.Add(_file())
        classes = {
            name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"prometheus.{name}"))
            for name, _ in _MESSAGES
        }
        self.write_request: Any = classes["WriteRequest"]
        self.time_series: Any = classes["TimeSeries"]
        self.label: Any = classes["Label"]
        self.sample: Any = classes["Sample"]

    def encode(self, series: Mapping[Key, tuple[list[int], list[float]]]) -> bytes:
        """A snappy-compressed WriteRequest: one TimeSeries per key, its samples (timestamps in ms, in
        time order) as given."""
        request = self.write_request()
        for labels, (timestamps_ms, values) in series.items():
            out = request.timeseries.add()
            add_label, add_sample = out.labels.add, out.samples.add  # add() is twice as fast as extend()
            for name, value in labels:
                add_label(name=name, value=value)
            for t, v in zip(timestamps_ms, values, strict=True):
                add_sample(value=v, timestamp=t)
        return bytes(cramjam.snappy.compress_raw(request.SerializeToString()))

    def decode(self, body: bytes) -> Any:
        """The WriteRequest in a body :meth:`encode` made (tests read what was sent with it)."""
        request = self.write_request()
        request.ParseFromString(bytes(cramjam.snappy.decompress_raw(body)))
        return request
