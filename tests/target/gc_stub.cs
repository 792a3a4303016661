// A thread the GC interrupts inside our IAT_PVALUE call stub (runtime/install.py: `mov rax, cell;
// jmp [rax]`): D.Sum, compiled by llilc-eh, calls B.M non-virtually (base.M) in a loop; with
// tiered compilation on, B.M is versionable with vtable slot backpatch and the runtime gives its
// entry point as IAT_PVALUE (its slot), so every call goes through our stub -- a good share of the
// thread's time -- while the main thread collects garbage N times: every collection suspends the
// spinning thread wherever it is, on Linux by a signal, after which the runtime reads the
// UNWIND_INFO of the RUNTIME_FUNCTION holding the interrupted IP.
using System;
using System.Threading;

class B { public virtual int M(int x) { return x + 1; } }

class D : B
{
    public override int M(int x) { return x + 2; }
    public static long calls;

    public int Sum(int n)
    {
        int s = 0;
        try { for (int i = 0; i < n; i++) s += base.M(i); }
        finally { calls++; }
        return s;
    }
}

public static class GcStub
{
    static volatile bool stop;
    static void Spin() { var d = new D(); while (!stop) d.Sum(1000); }

    public static int Main(string[] args)
    {
        int collections = args.Length > 0 ? int.Parse(args[0]) : 2000;
        var t = new Thread(Spin);
        t.Start();
        while (Interlocked.Read(ref D.calls) == 0) Thread.Yield();
        for (int i = 0; i < collections; i++) GC.Collect();
        stop = true;
        t.Join();
        Console.WriteLine("collections " + collections + ", Sum " + new D().Sum(10) + ", ran " + (D.calls > 1 ? "many times" : "once"));
        return 0;
    }
}
