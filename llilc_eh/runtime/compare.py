"""The metadata JIT-EE's answers beside the runtime's, for one compiled method.

The reader lays out types and fields from metadata (`reader/jitee.py`, CoreCLR 3.1's layout
rules re-implemented); inside the runtime the same questions can be asked of ICorJitInfo.
Where both answer, they must agree -- a disagreement means code that reads the wrong bytes.
This is the first half of issue 13 item 3 (one protocol, two implementations): the
comparison, over every method `run --compare-jitee` compiles; the reader still takes the
metadata's answers.

Questions, per token the method's IL names:
  field offset   ldfld / ldflda / stfld of an instance field: `FieldInfo.offset` vs
                 getFieldOffset (both from the object reference for a class's field)
  value class    the type of box / unbox / unbox.any / initobj / ldobj / stobj / sizeof /
                 cpobj / mkrefany / newarr / castclass / isinst / ldelem(a) / stelem tokens
                 (TypeDef / TypeRef): metadata's stack kind not an object reference vs
                 isValueClass
  class size     the same tokens when a value type: `TypeLayout.size` vs getClassSize
Generic instantiations and fields whose offset metadata could not compute are skipped (the
reader then asks for the offset through a cell anyway).
"""

from __future__ import annotations

from .jitinfo import JitInfo, JitInfoTrap
from .structs import CorInfoTokenKind

_FIELD_OPS = frozenset({"ldfld", "ldflda", "stfld"})
_TYPE_OPS = frozenset({"box", "unbox", "unbox.any", "initobj", "ldobj", "stobj", "sizeof", "cpobj", "mkrefany",
                       "newarr", "castclass", "isinst", "ldelema", "ldelem", "stelem"})


def compare_answers(jit: JitInfo, info, run, ee, damage: str | None = None) -> list[dict]:
    """damage="jitee-field-offset" (a negative control, tests only) shifts every metadata
    field offset by 8 before comparing: the report must then show differences."""
    from ..reader.jitee import StackKind
    shift = 8 if damage == "jitee-field-offset" else 0
    out: list[dict] = []
    seen: set[tuple[str, int]] = set()

    def answer(question: str, token: int, metadata, runtime) -> None:
        out.append({"question": question, "token": f"0x{token:08X}", "metadata": metadata, "runtime": runtime,
                    "agree": metadata == runtime})

    for ins in run.il.instructions:
        name, token = ins.op.name, ins.operand
        if not isinstance(token, int):
            continue
        if name in _FIELD_OPS and ("field", token) not in seen:
            seen.add(("field", token))
            field = ee.field(token)
            if field.is_static or field.offset is None:
                continue
            try:
                rt = jit.resolve_token(info.scope, token, CorInfoTokenKind.Field, context=info.ftn)
                answer("field offset", token, field.offset + shift, jit.field_offset(rt.hField))
            except JitInfoTrap as e:
                answer("field offset", token, field.offset, f"runtime refused: {e}")
        elif name in _TYPE_OPS and token >> 24 in (0x01, 0x02) and ("type", token) not in seen:
            seen.add(("type", token))
            sig = ee.token_type(token)
            value = ee.stack_kind(sig) is not StackKind.OBJ      # structs, primitives, enums
            try:
                rt = jit.resolve_token(info.scope, token, CorInfoTokenKind.Class, context=info.ftn)
                runtime_value = jit.is_value_class(rt.hClass)
                answer("value class", token, value, runtime_value)
                if value and runtime_value:
                    answer("class size", token, ee.layout(sig).size, jit.class_size(rt.hClass))
            except JitInfoTrap as e:
                answer("value class", token, value, f"runtime refused: {e}")
    return out


__all__ = ["compare_answers"]
