"""Binary layouts of x64 unwind data, each declared once with construct.

Source: Microsoft, "x64 exception handling" (UNWIND_INFO, UNWIND_CODE, RUNTIME_FUNCTION),
LLVM's Win64EH.h for the same numbers, and CoreCLR's win64unwind.h for the one CLR-only
extension (UWOP_SET_FPREG_LARGE, used by CoreCLR on Unix, hence by our Linux R2R corpus).
Parsing and building use the same declarations. Meaning (operation names, flag names,
register names, scaling of operands) lives in `codec.py`; this file is layout only.

    UNWIND_INFO
      byte 0      Version:3 (low bits), Flags:5 (high bits)
      byte 1      SizeOfProlog
      byte 2      CountOfCodes          number of 2-byte slots, not of operations
      byte 3      FrameRegister:4 (low), FrameOffset:4 (high, scaled by 16)
      slots       CountOfCodes UNWIND_CODEs; an operation takes 1-3 slots
      [slot]      one padding slot when CountOfCodes is odd (the array is always even)
      then        Flags & (EHANDLER|UHANDLER): ULONG handler RVA + language-specific data
                  Flags & CHAININFO:           RUNTIME_FUNCTION of the chained entry
"""

from __future__ import annotations

from construct import (BitsInteger, BitStruct, Bytes, FixedSized, GreedyRange, If, Int8ul, Int16ul,
                       Int32ul, Pass, Struct, Switch, Tell, this)

from ..assembly.r2r.structs import RuntimeFunctionAmd64

# Flag bits (Flags field) that select what follows the code array.
_HANDLER_FLAGS = 0x1 | 0x2  # UNW_FLAG_EHANDLER | UNW_FLAG_UHANDLER
_CHAININFO_FLAG = 0x4

# BitStruct reads each byte most-significant bit first, so the high fields come first.
UnwindInfoHeader = BitStruct(
    "flags" / BitsInteger(5),
    "version" / BitsInteger(3),
    "size_of_prolog" / BitsInteger(8),
    "count_of_codes" / BitsInteger(8),
    "frame_offset" / BitsInteger(4),     # scaled: bytes / 16
    "frame_register" / BitsInteger(4),
)

# RUNTIME_FUNCTION (.pdata entry; also the chained entry inside an UNWIND_INFO) is declared
# once, with the ReadyToRun records that come in arrays of it.
RuntimeFunction = RuntimeFunctionAmd64

# One unwind operation: its first slot, then the extra slots its operation takes, read as
# one little-endian integer (two slots: low slot first, which is Int32ul). Operation numbers:
# 1 ALLOC_LARGE (OpInfo 0: one slot, scaled by 8; OpInfo 1: two slots, unscaled),
# 4 SAVE_NONVOL / 8 SAVE_XMM128 (one slot, scaled by 8 / 16), 5 SAVE_NONVOL_FAR /
# 9 SAVE_XMM128_FAR (two slots, unscaled), 11 SET_FPREG_LARGE (CLR Unix; two slots, scaled by
# 16). All others take no extra slot; unknown ones are rejected by the codec, not here.
UnwindCode = Struct(
    "code_offset" / Int8ul,
    "operation" / BitStruct(
        "op_info" / BitsInteger(4),
        "unwind_op" / BitsInteger(4),
    ),
    "operand" / Switch(this.operation.unwind_op, {
        1: Switch(this.operation.op_info, {0: Int16ul, 1: Int32ul}, default=Pass),
        4: Int16ul,
        5: Int32ul,
        8: Int16ul,
        9: Int32ul,
        11: Int32ul,
    }, default=Pass),
)

UnwindCodeSlot = Int16ul  # one raw slot: the padding slot is kept as it is, whatever it holds

# Exception handler RVA and the language-specific data after it. How many bytes of data belong
# to the handler is not in the UNWIND_INFO; the caller says (parameter `handler_data_size`).
HandlerInfo = Struct(
    "handler_rva" / Int32ul,
    "handler_data" / Bytes(this._params.handler_data_size),
)

# The whole UNWIND_INFO. Parse with `handler_data_size=` (0 unless the caller knows better).
# The code array is bounded by CountOfCodes; an operation whose extra slots would run past it
# ends the greedy parse early, which the codec detects by counting slots. (The codec builds the
# record whole but reads it piece by piece, each piece by its declaration above: it is faster.)
UnwindInfo = Struct(
    "header" / UnwindInfoHeader,
    "codes" / FixedSized(this.header.count_of_codes * 2, GreedyRange(UnwindCode)),
    "padding" / If(this.header.count_of_codes % 2 == 1, UnwindCodeSlot),
    "handler" / If((this.header.flags & _HANDLER_FLAGS) != 0, HandlerInfo),
    "chained" / If((this.header.flags & _CHAININFO_FLAG) != 0, RuntimeFunction),
    "end" / Tell,
)

UNWIND_INFO_HEADER_SIZE = UnwindInfoHeader.sizeof()   # 4
UNWIND_CODE_SLOT_SIZE = UnwindCodeSlot.sizeof()       # 2
RUNTIME_FUNCTION_SIZE = RuntimeFunction.sizeof()      # 12
