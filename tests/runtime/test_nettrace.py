"""The nettrace reader (runtime/nettrace.py) on streams built from the same declarations
(eventpipe_structs.py): compressed event headers resolved against the previous event, metadata
ids resolved to (provider, event id, version), stacks interned by id, and the two ways a loss
shows -- a sequence number skipped, a stream without its closing tag. The real runtime's streams
are read in test_exception_counts.py."""

from __future__ import annotations

import io

import pytest

from llilc_eh.runtime.eventpipe_structs import (TAG_BEGIN_PRIVATE_OBJECT, TAG_END_OBJECT, TAG_NULL_REFERENCE, Block,
                                                CompressedEventHeader, EventBlockHeader, ExceptionThrownPayload,
                                                MetadataPayload, ObjectType, StackBlockData, StreamHeader,
                                                TraceFields)
from llilc_eh.runtime.nettrace import NettraceError, read

RUNTIME = "Microsoft-Windows-DotNETRuntime"


def _header(**fields) -> bytes:
    flags = 0
    for bit, names in ((0x01, ("metadata_id",)), (0x02, ("sequence_delta", "capture_thread_id", "processor")),
                       (0x04, ("thread_id",)), (0x08, ("stack_id",)), (0x80, ("payload_size",))):
        if any(n in fields for n in names):
            flags |= bit
    values = {n: None for n in ("metadata_id", "sequence_delta", "capture_thread_id", "processor", "thread_id",
                                "stack_id", "activity_id", "related_activity_id", "payload_size")}
    values.update(fields, flags=flags, timestamp_delta=fields.get("timestamp_delta", 1))
    return CompressedEventHeader.build(values)


def _block_data(events: list[bytes]) -> bytes:
    head = EventBlockHeader.build({"header_size": 20, "flags": 1, "min_timestamp": 0, "max_timestamp": 0})
    return head + b"".join(events)


def _object(stream: io.BytesIO, name: str, data: bytes) -> None:
    stream.write(bytes([TAG_BEGIN_PRIVATE_OBJECT]))
    stream.write(ObjectType.build({"version": 2, "min_reader_version": 2, "name": name}))
    Block.build_stream({"size": len(data), "data": data}, stream)
    stream.write(bytes([TAG_END_OBJECT]))


def _thrown(eip: int) -> bytes:
    return ExceptionThrownPayload.build({"exception_type": "System.Exception", "message": "m", "eip": eip,
                                         "hresult": 0x80131500, "flags": 0x10, "clr_instance_id": 0})


def build_stream(sequences=(1, 2, 3), closed=True) -> bytes:
    s = io.BytesIO()
    s.write(StreamHeader.build({}))
    s.write(bytes([TAG_BEGIN_PRIVATE_OBJECT]))
    s.write(ObjectType.build({"version": 4, "min_reader_version": 4, "name": "Trace"}))
    s.write(TraceFields.build({"sync_time_utc": [2026, 11, 3, 25, 20, 0, 0, 0], "sync_time_qpc": 0,
                               "qpc_frequency": 10**9, "pointer_size": 8, "process_id": 4242, "processors": 2,
                               "sampling_rate": 0}))
    s.write(bytes([TAG_END_OBJECT]))
    meta = MetadataPayload.build({"metadata_id": 1, "provider": RUNTIME, "event_id": 80, "event_name": "",
                                  "keywords": 0x8000, "version": 1, "level": 2}) + bytes(4)   # no fields
    _object(s, "MetadataBlock", _block_data([_header(metadata_id=0, payload_size=len(meta)) + meta]))
    _object(s, "StackBlock", StackBlockData.build({"first_id": 1, "count": 1, "stacks": [[0x1001, 0x2002]]}))
    events, last, last_thread = [], 0, 77
    for i, seq in enumerate(sequences):        # a number (thread 77) or (capture thread, number)
        thread, seq = seq if isinstance(seq, tuple) else (77, seq)
        payload = _thrown(0x5000 + i)
        fields = {"payload_size": len(payload)} if i == 0 else {}
        if i == 0:
            fields.update(metadata_id=1, thread_id=77, stack_id=1)
        if seq != last + 1 or thread != last_thread or i == 0:
            fields.update(sequence_delta=(seq - last - 1) & 0xFFFFFFFF, capture_thread_id=thread, processor=0)
        events.append(_header(**fields) + payload)
        last, last_thread = seq, thread
    _object(s, "EventBlock", _block_data(events))
    if closed:
        s.write(bytes([TAG_NULL_REFERENCE]))
    return s.getvalue()


def test_events_resolved_against_their_metadata_and_stacks():
    trace = read(build_stream())
    assert trace.complete and trace.sequence_gaps == 0 and trace.process_id == 4242
    assert [(e.provider, e.event_id, e.version, e.sequence, e.thread_id) for e in trace.events] == \
        [(RUNTIME, 80, 1, 1, 77), (RUNTIME, 80, 1, 2, 77), (RUNTIME, 80, 1, 3, 77)]
    assert [ExceptionThrownPayload.parse(e.payload).eip for e in trace.events] == [0x5000, 0x5001, 0x5002]
    assert all(e.stack == (0x1001, 0x2002) for e in trace.events)      # kept from the first header
    assert trace.objects == {"MetadataBlock": 1, "StackBlock": 1, "EventBlock": 1}


def test_a_skipped_sequence_number_is_a_gap():
    trace = read(build_stream(sequences=(1, 2, 5)))
    assert [e.sequence for e in trace.events] == [1, 2, 5]
    assert trace.sequence_gaps == 2


def test_two_capture_threads_interleaved_modulo_2_32():
    """Thread 78's first event after thread 77's third: its sequence number 1 is written as a
    delta modulo 2^32 from 3 (eventpipeblock.cpp) -- read as 1, and no gap on either thread
    (read without the modulo, the gap was 2^32: measured on the concurrency workload)."""
    trace = read(build_stream(sequences=(1, 2, 3, (78, 1), 4)))
    assert [(e.capture_thread_id, e.sequence) for e in trace.events] == [(77, 1), (77, 2), (77, 3), (78, 1), (77, 4)]
    assert trace.sequence_gaps == 0 and trace.complete


def test_a_stream_without_its_closing_tag_is_incomplete():
    trace = read(build_stream(closed=False))
    assert not trace.complete and len(trace.events) == 3
    cut = read(build_stream()[:-40])          # the event block cut: read as far as it goes
    assert not cut.complete and cut.events == []


def test_not_a_nettrace_stream():
    with pytest.raises(NettraceError, match="no nettrace stream header"):
        read(b"Netperf!" + bytes(40))
