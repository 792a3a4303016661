// [MethodImpl(MethodImplOptions.Synchronized)] methods with EH of their own, compiled by
// llilc-eh under `run`: the JIT adds the lock -- `this` for an instance method, the class's
// type object for a static one -- taken in the prolog region and released on every return and
// by a fault clause of the JIT's own when an exception leaves the method. Two threads race on a
// read-wait-write inside the lock (lost updates without it); an exception leaving the method
// must release the lock: another thread then gets it at once (Monitor.TryEnter).
using System;
using System.Runtime.CompilerServices;
using System.Threading;

class Counter
{
    int value;

    [MethodImpl(MethodImplOptions.Synchronized)]
    public int Add(int k, bool fail)
    {
        try
        {
            int v = value;
            Thread.SpinWait(40);                 // a window for the other thread, were there no lock
            value = v + k;
            if (fail) throw new InvalidOperationException("fail " + k + " held=" + Monitor.IsEntered(this));
            return value;
        }
        catch (FormatException) { return -1; }   // never taken: the exception leaves the method
    }

    [MethodImpl(MethodImplOptions.Synchronized)]
    public string Early(int k)
    {
        try
        {
            if (k == 0) return "zero held=" + Monitor.IsEntered(this);
            if (k < 0) throw new ArgumentOutOfRangeException("k");
            return "k=" + k;
        }
        finally { value += 100; }
    }

    public int Value => value;
}

static class Statics
{
    static long total;
    public static bool HeldInFinally;

    [MethodImpl(MethodImplOptions.Synchronized)]
    public static long Bump(int k)
    {
        try
        {
            long t = total;
            Thread.SpinWait(40);
            total = t + k;
            return total;
        }
        finally { if (k < 0) Console.WriteLine("negative"); }
    }

    [MethodImpl(MethodImplOptions.Synchronized)]
    public static void Throws(string message)
    {
        try { throw new ArgumentException(message); }
        finally { HeldInFinally = Monitor.IsEntered(typeof(Statics)); }
    }

    public static long Total => total;
}

static class Program
{
    static int Main()
    {
        var c = new Counter();
        Contention.Race(() => { for (int i = 0; i < 4000; i++) c.Add(1, false); });
        Console.WriteLine("instance race: " + c.Value);
        Contention.Race(() => { for (int i = 0; i < 4000; i++) Statics.Bump(2); });
        Console.WriteLine("static race: " + Statics.Total);

        try { c.Add(5, true); }
        catch (InvalidOperationException e) { Console.WriteLine(e.Message + " after=" + Monitor.IsEntered(c)); }
        Console.WriteLine("other thread gets the instance lock: " + Contention.OtherThreadGets(c));

        Console.WriteLine(c.Early(0) + " " + c.Early(3) + " after=" + Monitor.IsEntered(c));
        try { c.Early(-1); }
        catch (ArgumentOutOfRangeException) { Console.WriteLine("early threw, value " + c.Value); }
        Console.WriteLine("other thread gets the instance lock: " + Contention.OtherThreadGets(c));

        try { Statics.Throws("static fault"); }
        catch (ArgumentException e)
        {
            Console.WriteLine(e.Message + " held in finally=" + Statics.HeldInFinally
                              + " after=" + Monitor.IsEntered(typeof(Statics)));
        }
        Console.WriteLine("other thread gets the static lock: " + Contention.OtherThreadGets(typeof(Statics)));
        Console.WriteLine("bump " + Statics.Bump(-1));
        return 0;
    }
}
