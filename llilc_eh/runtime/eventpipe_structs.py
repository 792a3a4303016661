"""Binary layouts of CoreCLR 3.1's diagnostics IPC and of the nettrace stream, declared once.

What `run` needs to count exceptions through our frames exactly: an EventPipe session opened
from outside the process over the diagnostics socket (the IPC messages below), the nettrace
stream the runtime sends back on it (the FastSerialization objects and blocks below), and the
payloads of the few runtime events we read. Meaning -- which event is which, how the reader
walks the objects, what is counted -- lives in `nettrace.py` and `events.py`; this file is
layout only.

Facts (dotnet/coreclr v3.1.23): src/vm/diagnosticsprotocol.h (IpcHeader: a 14-byte magic
"DOTNET_IPC_V1\\0", the total size, command set and id, 2 reserved bytes; strings are a uint32
count of UTF-16 code units, the terminating NUL included), src/vm/eventpipeprotocolhelper.h/.cpp
(EventPipe command set 0x02: StopTracing 0x01, CollectTracing2 0x03 -- buffer size in MB,
format, rundown flag as one byte, providers), src/vm/fastserializer.cpp and eventpipefile.cpp
("Nettrace", then "!FastSerialization.1" length-prefixed, then objects; a block's payload is
its size, padding to a 4-byte stream offset, the bytes), eventpipeblock.cpp (the event block
header; the compressed event header, each field present by a flag bit, integers as LEB128),
src/vm/ClrEtwAll.man (the event templates).
"""

from __future__ import annotations

from construct import (Adapter, Array, Bytes, Const, CString, Flag, If, Int8ul, Int16ul, Int32sl, Int32ul, Int64sl,
                       Int64ul, GreedyRange, Padding, PascalString, Prefixed, PrefixedArray, Struct, VarInt, this)

# -- diagnostics IPC (diagnosticsprotocol.h, eventpipeprotocolhelper.h) --------------------------

IPC_MAGIC = b"DOTNET_IPC_V1\x00"

IpcHeader = Struct(
    "magic" / Const(IPC_MAGIC),
    "size" / Int16ul,            # header + payload, in bytes
    "command_set" / Int8ul,
    "command_id" / Int8ul,
    "reserved" / Int16ul,
)
IPC_HEADER_SIZE = IpcHeader.sizeof()


class _IpcString(Adapter):
    """A uint32 count of UTF-16 code units with the NUL, then the units; count 0: no string."""

    def _decode(self, obj, context, path):
        return obj.text.decode("utf-16-le").rstrip("\x00") if obj.units else None

    def _encode(self, obj, context, path):
        data = (obj + "\x00").encode("utf-16-le") if obj is not None else b""
        return {"units": len(data) // 2, "text": data}


IpcString = _IpcString(Struct("units" / Int32ul, "text" / Bytes(this.units * 2)))

ProviderConfig = Struct(
    "keywords" / Int64ul,
    "level" / Int32ul,           # 0..5 (5 verbose)
    "name" / IpcString,
    "filter" / IpcString,        # optional: None
)

CollectTracing2 = Struct(
    "circular_buffer_mb" / Int32ul,
    "format" / Int32ul,          # 0 NetPerf, 1 NetTrace
    "rundown" / Flag,            # one byte (a C++ bool)
    "providers" / PrefixedArray(Int32ul, ProviderConfig),
)

StopTracing = Struct("session_id" / Int64ul)
SessionIdReply = Struct("session_id" / Int64ul)     # the OK reply to CollectTracing2 and StopTracing
ErrorReply = Struct("hresult" / Int32ul)            # the Error reply (command id 0xFF)

# -- nettrace (fastserializer.cpp, eventpipefile.cpp, eventpipeblock.cpp) ----------------------

NETTRACE_MAGIC = b"Nettrace"

StreamHeader = Struct(
    "magic" / Const(NETTRACE_MAGIC),
    "serializer" / Const("!FastSerialization.1", PascalString(Int32ul, "ascii")),
)

TAG_NULL_REFERENCE = 1
TAG_BEGIN_PRIVATE_OBJECT = 5
TAG_END_OBJECT = 6

# An object's type: itself an object whose type is the null reference.
ObjectType = Struct(
    "begin" / Const(TAG_BEGIN_PRIVATE_OBJECT, Int8ul),
    "type_of_type" / Const(TAG_NULL_REFERENCE, Int8ul),
    "version" / Int32sl,
    "min_reader_version" / Int32sl,
    "name" / PascalString(Int32ul, "utf8"),
    "end" / Const(TAG_END_OBJECT, Int8ul),
)

# The first object's fields (the trace as a whole).
TraceFields = Struct(
    "sync_time_utc" / Int16ul[8],     # year, month, day of week, day, hour, minute, second, ms
    "sync_time_qpc" / Int64sl,
    "qpc_frequency" / Int64sl,
    "pointer_size" / Int32sl,
    "process_id" / Int32sl,
    "processors" / Int32sl,
    "sampling_rate" / Int32sl,
)

# Every other object (EventBlock, MetadataBlock, StackBlock, SPBlock) is a block: its size,
# zero padding to a 4-byte offset in the stream (counted from the "Nettrace" magic), its bytes.
Block = Struct(
    "size" / Int32ul,
    Padding(lambda ctx: -ctx._io.tell() % 4),
    "data" / Bytes(this.size),
)

# The header of an EventBlock's and a MetadataBlock's data; events follow at header_size.
EventBlockHeader = Struct(
    "header_size" / Int16ul,
    "flags" / Int16ul,           # bit 0: compressed event headers
    "min_timestamp" / Int64ul,
    "max_timestamp" / Int64ul,
)
BLOCK_FLAG_COMPRESSED_HEADERS = 0x1

# A StackBlock's data: stacks interned by id (the first id, then one more per stack), each the
# return addresses of the managed frames at the event, innermost first (8 bytes each on x64).
StackBlockData = Struct(
    "first_id" / Int32ul,
    "count" / Int32ul,
    "stacks" / Array(this.count, Prefixed(Int32ul, GreedyRange(Int64ul))),
)

# An SPBlock's data: every thread that may log, with a lower bound of the last sequence number
# it gave an event (written or dropped) -- a bound above the last event read is a loss.
SequencePoint = Struct(
    "timestamp" / Int64ul,
    "threads" / PrefixedArray(Int32ul, Struct("thread_id" / Int64ul, "sequence" / Int32ul)),
)

# A compressed event header: a field absent by its flag keeps the previous event's value in the
# same block (starting from zeros); sequence number and timestamp are deltas.
EVENT_FLAG_METADATA_ID = 0x01
EVENT_FLAG_CAPTURE_THREAD_AND_SEQUENCE = 0x02
EVENT_FLAG_THREAD_ID = 0x04
EVENT_FLAG_STACK_ID = 0x08
EVENT_FLAG_ACTIVITY_ID = 0x10
EVENT_FLAG_RELATED_ACTIVITY_ID = 0x20
EVENT_FLAG_SORTED = 0x40
EVENT_FLAG_PAYLOAD_SIZE = 0x80

CompressedEventHeader = Struct(
    "flags" / Int8ul,
    "metadata_id" / If(this.flags & EVENT_FLAG_METADATA_ID, VarInt),
    "sequence_delta" / If(this.flags & EVENT_FLAG_CAPTURE_THREAD_AND_SEQUENCE, VarInt),   # minus one
    "capture_thread_id" / If(this.flags & EVENT_FLAG_CAPTURE_THREAD_AND_SEQUENCE, VarInt),
    "processor" / If(this.flags & EVENT_FLAG_CAPTURE_THREAD_AND_SEQUENCE, VarInt),
    "thread_id" / If(this.flags & EVENT_FLAG_THREAD_ID, VarInt),
    "stack_id" / If(this.flags & EVENT_FLAG_STACK_ID, VarInt),
    "timestamp_delta" / VarInt,
    "activity_id" / If(this.flags & EVENT_FLAG_ACTIVITY_ID, Bytes(16)),
    "related_activity_id" / If(this.flags & EVENT_FLAG_RELATED_ACTIVITY_ID, Bytes(16)),
    "payload_size" / If(this.flags & EVENT_FLAG_PAYLOAD_SIZE, VarInt),
)

# A metadata record's payload (the event blob in a MetadataBlock); the field descriptions that
# follow are not read -- the runtime's own events carry none in 3.1 (their layout is the
# manifest's, below).
MetadataPayload = Struct(
    "metadata_id" / Int32ul,
    "provider" / CString("utf_16_le"),
    "event_id" / Int32ul,
    "event_name" / CString("utf_16_le"),
    "keywords" / Int64ul,
    "version" / Int32ul,
    "level" / Int32ul,
)

# -- the runtime events we read (ClrEtwAll.man templates) ----------------------------------------

# ExceptionThrown_V1 (id 80, template Exception)
ExceptionThrownPayload = Struct(
    "exception_type" / CString("utf_16_le"),
    "message" / CString("utf_16_le"),
    "eip" / Int64ul,             # win:Pointer, 8 bytes on x64: the throwing frame's IP (return address - 1)
    "hresult" / Int32ul,
    "flags" / Int16ul,           # ExceptionThrownFlagsMap: 0x4 rethrown, 0x2 nested
    "clr_instance_id" / Int16ul,
)

# ExceptionCatchStart / ExceptionFinallyStart / ExceptionFilterStart (250/252/254, template
# ExceptionHandling): the handler's (funclet's) first instruction and the method it belongs to
ExceptionHandlingPayload = Struct(
    "entry_eip" / Int64ul,
    "method_id" / Int64ul,       # the MethodDesc: CORINFO_METHOD_HANDLE as the JIT saw it
    "method_name" / CString("utf_16_le"),
    "clr_instance_id" / Int16ul,
)

# ILStubGenerated (id 88, template ILStubGenerated, keyword Interop 0x2000): a stub the runtime
# generated, the method it marshals for, and its IL as text (with its EH clauses as `.try` lines)
ILStubGeneratedPayload = Struct(
    "clr_instance_id" / Int16ul,
    "module_id" / Int64ul,
    "stub_method_id" / Int64ul,
    "stub_flags" / Int32ul,      # ILStubGeneratedFlagsMap: 0x1 reverse, 0x2 COM, 0x8 delegate, 0x10 vararg
    "managed_token" / Int32ul,
    "managed_namespace" / CString("utf_16_le"),
    "managed_name" / CString("utf_16_le"),
    "managed_signature" / CString("utf_16_le"),
    "native_signature" / CString("utf_16_le"),
    "stub_signature" / CString("utf_16_le"),
    "stub_il" / CString("utf_16_le"),
)

__all__ = [n for n in dir() if n[0].isupper() and not n.startswith("_")]
