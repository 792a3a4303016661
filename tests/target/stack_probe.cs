// Stack probes (llilc_eh.target.stack_probe, backend.image.STACK_PROBE_CODE) on the real runtime:
// stackalloc (a dynamic alloca: LLVM probes it) of 100 bytes to 1 MB, and a frame above a page
// (a large local struct), in methods with EH that llilc-eh compiles; on a secondary thread too
// (its stack has a guard page below the probed pages).
using System;
using System.Threading;
public unsafe struct Page { public fixed byte Bytes[12000]; }
public static unsafe class Probe {
    static int Touch(int n) {
        try {
            byte* p = stackalloc byte[n];
            int s = 0;
            for (int i = 0; i < n; i += 512) p[i] = (byte)(i >> 9);
            for (int i = 0; i < n; i += 512) s += p[i];
            return s;
        } finally { Console.WriteLine("finally " + n); }
    }
    static int Frame(int k) {
        try {
            Page page = new Page();
            page.Bytes[k] = 7; page.Bytes[11999 - k] = 5;
            return page.Bytes[k] + page.Bytes[11999 - k] + page.Bytes[6000];
        } catch (Exception) { return -1; }
    }
    static void Run() {
        foreach (int n in new[] { 100, 5000, 65536, 1 << 20 }) Console.WriteLine(n + " -> " + Touch(n));
        Console.WriteLine("frame " + Frame(3));
    }
    public static void Main() {
        Run();
        var t = new Thread(Run, 4 << 20);
        t.Start(); t.Join();
    }
}
