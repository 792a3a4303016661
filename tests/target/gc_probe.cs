// A thread caught in our stack probe routine by the GC (backend.image, "Unwind data"): Spin
// calls Touch, compiled by llilc-eh, whose 1 MB stackalloc calls the probe (256 pages touched
// per call: most of the thread's time), while the main thread collects garbage N times; every
// collection suspends the spinning thread wherever it is -- on Linux by a signal, after which
// the runtime reads the UNWIND_INFO of the interrupted IP.
using System;
using System.Threading;
public static unsafe class GcProbe {
    static volatile bool stop;
    static long calls;
    static int size = 1 << 20;
    static int Touch(int n) {
        try {
            byte* p = stackalloc byte[n];
            p[0] = 1; p[n - 1] = 2;
            return p[0] + p[n - 1];
        } finally { calls++; }
    }
    static void Spin() { while (!stop) Touch(size); }
    public static int Main(string[] args) {
        int collections = args.Length > 0 ? int.Parse(args[0]) : 2000;
        if (args.Length > 1) size = int.Parse(args[1]);
        var t = new Thread(Spin, 8 << 20);
        t.Start();
        while (Interlocked.Read(ref calls) == 0) Thread.Yield();
        for (int i = 0; i < collections; i++) GC.Collect();
        stop = true;
        t.Join();
        Console.WriteLine("collections " + collections + ", Touch ran " + (calls > 1 ? "many times" : "once"));
        return 0;
    }
}
