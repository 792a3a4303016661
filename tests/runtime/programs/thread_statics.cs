// [ThreadStatic] fields read and written by methods with EH (compiled by llilc-eh under `run`):
// each thread sees its own values -- two threads write different ones, a barrier between the
// writes and the reads -- and the main thread, which wrote none, sees the defaults. The
// references held only by thread statics (a string, an array, a boxed struct's string, an
// object) survive collections forced between the writes and the reads, with garbage allocated
// so the GC has something to compact. Holder has a static constructor (it runs once, not per
// thread); TS has none (the runtime names the _NOCTOR helper). ldsflda of a thread static goes
// to Interlocked.Add.
using System;
using System.Threading;

struct Pair { public int A; public long B; public string S; }

class Holder
{
    [ThreadStatic] public static int Count;
    [ThreadStatic] public static string Name;
    [ThreadStatic] public static Pair P;
    [ThreadStatic] public static object Box;
    public static int Plain = 7;
    static Holder() { Console.WriteLine("Holder cctor"); }
}

static class TS
{
    [ThreadStatic] static long Local;
    [ThreadStatic] static int[] Arr;
    [ThreadStatic] static double D;

    static string Work(int id)
    {
        try
        {
            Holder.Count += id;
            Holder.Name = new string((char)('a' + id), 3) + id;
            Holder.P.A = id * 10;
            Holder.P.B = id * 100L;
            Holder.P.S = "pair" + new string('!', id);
            Interlocked.Add(ref Local, id * 1000);
            Arr = new int[] { id, id + 1 };
            D = id / 4.0;
            Holder.Box = new object[] { "box" + id };
            if (id == 2) throw new InvalidOperationException("thrown" + id);
            return "no throw";
        }
        catch (InvalidOperationException e)
        {
            Holder.Count += 100;
            return e.Message + " " + Holder.Name;
        }
        finally
        {
            Churn();
            Holder.Count += 1000;
        }
    }

    static void Churn()
    {
        object[] junk = new object[2000];
        for (int i = 0; i < junk.Length; i++) junk[i] = new string('x', i % 50);
        GC.Collect();
        GC.WaitForPendingFinalizers();
        GC.Collect();
    }

    static string Read()
    {
        try
        {
            Churn();
            string head = Holder.Count + " " + (Holder.Name ?? "<null>") + " " + Holder.P.A + " " + Holder.P.B
                          + " " + (Holder.P.S ?? "<null>") + " " + Local + " " + D + " " + Holder.Plain;
            return head + " " + Arr[0] + "+" + Arr[1] + " " + ((object[])Holder.Box)[0];
        }
        catch (NullReferenceException)
        {
            return "defaults: " + Holder.Count + " " + (Holder.Name == null) + " " + Local + " " + D;
        }
        finally
        {
            Holder.Count += 10000;
        }
    }

    static int Main()
    {
        var results = new string[3];
        var barrier = new Barrier(2);
        var threads = new Thread[3];
        for (int id = 1; id <= 2; id++)
        {
            int me = id;
            threads[me] = new Thread(() =>
            {
                string w = Work(me);
                barrier.SignalAndWait();       // both threads wrote before either reads
                results[me] = w + " | " + Read();
            });
            threads[me].Start();
        }
        threads[1].Join();
        threads[2].Join();
        results[0] = Read();                   // the main thread wrote nothing
        for (int i = 0; i < 3; i++) Console.WriteLine(i + ": " + results[i]);
        Console.WriteLine("main again: " + Read());
        return 0;
    }
}
