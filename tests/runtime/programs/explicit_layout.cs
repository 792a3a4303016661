// A 16-byte explicit-layout struct (overlapping fields) passed and returned by value from
// methods with EH: the metadata JIT-EE cannot classify it for SysV (fields may overlap: the
// reader refuses it, abi-unsupported); the runtime can (getSystemVAmd64PassStructInRegisterDescriptor).
using System;
using System.Runtime.InteropServices;

[StructLayout(LayoutKind.Explicit)]
struct Overlay { [FieldOffset(0)] public long L; [FieldOffset(0)] public double D; [FieldOffset(8)] public int I; }

static class Explicit
{
    static Overlay Make(long l, int i) { try { if (i < 0) throw new ArgumentException("neg"); return new Overlay { L = l, I = i }; } catch (ArgumentException) { return new Overlay { L = -1, I = -1 }; } }
    static long Sum(Overlay o, int k) { try { if (k == 0) throw new DivideByZeroException(); return o.L + o.I / k; } catch (DivideByZeroException) { return o.I; } }
    static int Main()
    {
        for (int i = -1; i < 3; i++) { var o = Make(40 + i, i); Console.WriteLine($"{o.L} {o.I} {o.D > 0} {Sum(o, i)}"); }
        return 0;
    }
}
