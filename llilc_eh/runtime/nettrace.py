"""A reader of the nettrace stream (format V4) that CoreCLR 3.1 sends on an EventPipe session.

Why our own: no PyPI package reads nettrace, and `run` needs only a small part of it -- the
events of one provider, their header fields and payloads -- but needs it exactly, with a way to
tell that nothing was lost. So the reader walks every object of the stream (the trace object,
then metadata, event, stack and sequence-point blocks until the null-reference tag that ends
the stream), decodes every compressed event header (a field a flag leaves out keeps the value
of the previous event of the same block), resolves each event's metadata id to (provider,
event id, version), and checks every capture thread's sequence numbers: the runtime numbers a
thread's events 1, 2, 3, ... whether it wrote them or dropped them, so a gap is a lost event
(counted in `Trace.sequence_gaps`). Layouts are declared in eventpipe_structs.py.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from construct import ConstructError

from ..errors import LlilcEhError
from .eventpipe_structs import (BLOCK_FLAG_COMPRESSED_HEADERS, TAG_BEGIN_PRIVATE_OBJECT, TAG_END_OBJECT,
                                TAG_NULL_REFERENCE, Block, CompressedEventHeader, EventBlockHeader,
                                MetadataPayload, ObjectType, SequencePoint, StackBlockData, StreamHeader, TraceFields)


class NettraceError(LlilcEhError):
    """The stream is not the nettrace we read (wrong magic, tag, version or a cut block)."""

    stage = "nettrace"

    def offset_text(self) -> str:
        return f"stream offset {self.offset}"


@dataclass(frozen=True)
class TraceEvent:
    provider: str
    event_id: int
    version: int
    thread_id: int
    capture_thread_id: int
    sequence: int
    timestamp: int
    payload: bytes
    stack: tuple[int, ...] = ()     # the managed frames' IPs, innermost first (when captured)


@dataclass
class Trace:
    process_id: int = 0
    pointer_size: int = 0
    events: list[TraceEvent] = field(default_factory=list)
    complete: bool = False        # the stream ended with its null-reference tag (the session stopped)
    sequence_gaps: int = 0        # events the runtime numbered but the stream does not hold
    objects: dict[str, int] = field(default_factory=dict)    # object type name -> count


def read(data: bytes) -> Trace:
    """The whole stream (from the "Nettrace" magic on). A stream cut short (the process died
    before the session stopped) is read as far as it goes, `complete` False."""
    stream = io.BytesIO(data)
    trace = Trace()
    try:
        StreamHeader.parse_stream(stream)
        _expect(stream, TAG_BEGIN_PRIVATE_OBJECT)
        kind = ObjectType.parse_stream(stream)
        if kind.name != "Trace" or kind.min_reader_version > 4:
            raise NettraceError(f"first object {kind.name!r} version {kind.version} (min reader "
                                f"{kind.min_reader_version}): not a nettrace V4 trace", offset=stream.tell())
        fields = TraceFields.parse_stream(stream)
        trace.process_id, trace.pointer_size = fields.process_id, fields.pointer_size
        _expect(stream, TAG_END_OBJECT)
    except ConstructError as e:
        raise NettraceError(f"no nettrace stream header: {e}", offset=stream.tell()) from None
    metadata: dict[int, tuple[str, int, int]] = {}
    last_sequence: dict[int, int] = {}
    stacks: dict[int, tuple[int, ...]] = {}
    while True:
        start = stream.tell()
        tag = stream.read(1)
        if not tag:
            return trace                      # cut short: the session never stopped
        if tag[0] == TAG_NULL_REFERENCE:
            trace.complete = True
            return trace
        if tag[0] != TAG_BEGIN_PRIVATE_OBJECT:
            raise NettraceError(f"tag {tag[0]} where an object begins", offset=start)
        try:
            kind = ObjectType.parse_stream(stream)
            block = Block.parse_stream(stream)
            end = stream.read(1)
        except ConstructError:
            return trace                      # the last block was cut
        if not end:
            return trace
        if end[0] != TAG_END_OBJECT:
            raise NettraceError(f"{kind.name} not closed by the end-object tag", offset=stream.tell() - 1)
        trace.objects[kind.name] = trace.objects.get(kind.name, 0) + 1
        if kind.name == "MetadataBlock":
            for header, payload in _event_blobs(block.data, start):
                m = MetadataPayload.parse(payload)
                metadata[m.metadata_id] = (m.provider, m.event_id, m.version)
        elif kind.name == "EventBlock":
            for header, payload in _event_blobs(block.data, start):
                provider, event_id, version = metadata.get(header["metadata_id"], ("?", -1, -1))
                expected = last_sequence.get(header["capture_thread_id"])
                if expected is not None and header["sequence"] > expected + 1:   # (a restart at 1: a new thread)
                    trace.sequence_gaps += header["sequence"] - expected - 1
                last_sequence[header["capture_thread_id"]] = header["sequence"]
                trace.events.append(TraceEvent(provider, event_id, version, header["thread_id"],
                                               header["capture_thread_id"], header["sequence"],
                                               header["timestamp"], payload, stacks.get(header["stack_id"], ())))
        elif kind.name == "SPBlock":
            for t in SequencePoint.parse(block.data).threads:
                seen = last_sequence.get(t.thread_id, 0)
                if t.sequence > seen:
                    trace.sequence_gaps += t.sequence - seen
                    last_sequence[t.thread_id] = t.sequence
        elif kind.name == "StackBlock":
            block_stacks = StackBlockData.parse(block.data)
            for i, ips in enumerate(block_stacks.stacks):
                stacks[block_stacks.first_id + i] = tuple(ips)


def _expect(stream, tag: int) -> None:
    got = stream.read(1)
    if not got or got[0] != tag:
        raise NettraceError(f"expected tag {tag}, found {got[0] if got else 'the end'}", offset=stream.tell())


def _event_blobs(data: bytes, where: int):
    """(header fields, payload) of each event of an EventBlock's or MetadataBlock's data."""
    stream = io.BytesIO(data)
    head = EventBlockHeader.parse_stream(stream)
    if not head.flags & BLOCK_FLAG_COMPRESSED_HEADERS:
        raise NettraceError("a block with uncompressed event headers (only 3.1's compressed ones are read)",
                            offset=where)
    stream.seek(head.header_size)
    state = {"metadata_id": 0, "sequence": 0, "capture_thread_id": 0, "processor": 0, "thread_id": 0,
             "stack_id": 0, "timestamp": 0, "payload_size": 0}
    while stream.tell() < len(data):
        try:
            h = CompressedEventHeader.parse_stream(stream)
        except ConstructError as e:
            raise NettraceError(f"event header cut short: {e}", offset=where) from None
        if h.metadata_id is not None:
            state["metadata_id"] = h.metadata_id
        # 32-bit arithmetic, as the writer's: an event of another capture thread may have a
        # lower number than the previous one, and its delta is written modulo 2^32
        if h.sequence_delta is not None:
            state["sequence"] = (state["sequence"] + h.sequence_delta) & 0xFFFFFFFF
            state["capture_thread_id"] = h.capture_thread_id
            state["processor"] = h.processor
        if state["metadata_id"] != 0:
            state["sequence"] = (state["sequence"] + 1) & 0xFFFFFFFF
        if h.thread_id is not None:
            state["thread_id"] = h.thread_id
        if h.stack_id is not None:
            state["stack_id"] = h.stack_id
        state["timestamp"] += h.timestamp_delta
        if h.payload_size is not None:
            state["payload_size"] = h.payload_size
        payload = stream.read(state["payload_size"])
        if len(payload) != state["payload_size"]:
            raise NettraceError("event payload cut short", offset=where)
        yield dict(state), payload


__all__ = ["NettraceError", "Trace", "TraceEvent", "read"]
