"""The metadata JIT-EE's answers beside the runtime's, for one compiled method.

The metadata JIT-EE (`reader/jitee.py`) lays out types and fields with CoreCLR 3.1's layout
rules re-implemented; inside the runtime the same questions are asked of ICorJitInfo
(`runtime/ee.py`, one protocol, two implementations: llilc_eh.ee.protocol). Where both
answer, they must agree -- a disagreement means code that reads the wrong bytes, in whichever
place still takes the metadata's answer (`translate`, `validate`).

Two sources of questions, both in the report (`"source"`):
  reader   (`run --jitee runtime`, the default) every layout question the reader asked while
           translating the method, each answered by both implementations -- the runtime's
           answer is the one the reader used (ee.RuntimeJitEE's log): field offsets, value
           class or not, class sizes, alignments (types with a layout of their own), GC
           references held, GC layouts (reference offsets), SysV classifications, method
           attributes (static / virtual / abstract);
  il       per token the method's IL names, asked here of metadata and of the runtime:
    field offset   ldfld / ldflda / stfld of an instance field: `FieldInfo.offset` vs
                   getFieldOffset (both from the object reference for a class's field)
    value class    the type of box / unbox / unbox.any / initobj / ldobj / stobj / sizeof /
                   cpobj / mkrefany / newarr / castclass / isinst / ldelem(a) / stelem tokens
                   (TypeDef / TypeRef): metadata's stack kind not an object reference vs
                   isValueClass
    class size     the same tokens when a value type: `TypeLayout.size` vs getClassSize
  (generic instantiations and fields whose offset metadata could not compute are skipped).
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
    from ..reader.types import StackKind
    shift = 8 if damage == "jitee-field-offset" else 0
    out: list[dict] = []
    asked = getattr(ee, "asked", None)
    if asked is not None:                  # the runtime-backed JIT-EE: what the reader asked
        for a in asked():
            a = {**a, "source": "reader"}
            if shift and a["question"] == "field offset" and isinstance(a["metadata"], int):
                a["metadata"] += shift
                a["agree"] = a["metadata"] == a["runtime"]
            out.append(a)
        ee = ee.metadata                   # the IL scan below compares metadata with the runtime
    seen: set[tuple[str, int]] = set()

    def answer(question: str, token: int, metadata, runtime) -> None:
        out.append({"question": question, "token": f"0x{token:08X}", "metadata": metadata, "runtime": runtime,
                    "agree": metadata == runtime, "source": "il"})

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
