// [MethodImpl(MethodImplOptions.Synchronized)] methods with no try of their own: their only EH is
// the JIT's -- the monitor taken at entry, released on return and by the JIT's own fault clause
// when an exception leaves the method (clauses/synchronized.py, reader/synchronized.py). altjit.c
// offers them to llilc-eh although their IL has no clause (getMethodAttribs: CORINFO_FLG_SYNCH).
// Two threads race on read-wait-write inside each lock (an update is lost without it); two threads
// contend for a lock whose method throws out half the time (the lock must be released each time,
// or the other thread waits for ever); after a throw another thread gets the lock at once.
using System;
using System.Runtime.CompilerServices;
using System.Threading;

class Account
{
    int balance;

    [MethodImpl(MethodImplOptions.Synchronized)]
    public int Deposit(int k)
    {
        int b = balance;
        Thread.SpinWait(40);                 // a window for the other thread, were there no lock
        balance = b + k;
        return balance;
    }

    [MethodImpl(MethodImplOptions.Synchronized)]
    public int Withdraw(int k)
    {
        int b = balance;
        Thread.SpinWait(20);
        if (k > b) throw new InvalidOperationException("overdrawn by " + (k - b) + " held=" + Monitor.IsEntered(this));
        balance = b - k;
        return balance;
    }

    public int Balance => balance;
}

static class Ledger
{
    static long total;

    [MethodImpl(MethodImplOptions.Synchronized)]
    public static long Add(int k)
    {
        long t = total;
        Thread.SpinWait(40);
        total = t + k;
        return total;
    }

    [MethodImpl(MethodImplOptions.Synchronized)]
    public static long Take(int k)
    {
        long t = total;
        Thread.SpinWait(20);
        if (k > t) throw new ArgumentException("short by " + (k - t) + " held=" + Monitor.IsEntered(typeof(Ledger)));
        total = t - k;
        return total;
    }

    public static long Total => total;
}

static class Program
{
    static int failures;

    static void Withdrawals(Account a)
    {
        for (int i = 0; i < 2000; i++)
        {
            a.Deposit(1);
            if (i % 2 == 0) continue;
            try { a.Withdraw(3); }                          // ours alone hold 2: throws out unless the other left some
            catch (InvalidOperationException) { Interlocked.Increment(ref failures); }
        }
    }

    static void Takes()
    {
        for (int i = 0; i < 2000; i++)
        {
            Ledger.Add(1);
            if (i % 2 == 0) continue;
            try { Ledger.Take(3); }
            catch (ArgumentException) { Interlocked.Increment(ref failures); }
        }
    }

    static int Main(string[] args)
    {
        if (args.Length == 0 || args[0] != "solo") Contended();   // solo: no thread waits on a lock (the control)
        try { new Account().Withdraw(5); }
        catch (InvalidOperationException e) { Console.WriteLine(e.Message); }
        var c = new Account();
        try { c.Withdraw(7); }
        catch (InvalidOperationException e) { Console.WriteLine(e.Message + " after=" + Monitor.IsEntered(c) + " other thread gets it: " + Contention.OtherThreadGets(c)); }
        try { Ledger.Take(1 << 30); }
        catch (ArgumentException e) { Console.WriteLine("static: " + e.Message.StartsWith("short by") + " held=" + e.Message.EndsWith("held=True") + " other thread gets it: " + Contention.OtherThreadGets(typeof(Ledger))); }
        return 0;
    }

    static void Contended()
    {
        var a = new Account();
        Contention.Race(() => { for (int i = 0; i < 4000; i++) a.Deposit(1); });
        Console.WriteLine("instance race: " + a.Balance);
        Contention.Race(() => { for (int i = 0; i < 4000; i++) Ledger.Add(2); });
        Console.WriteLine("static race: " + Ledger.Total);

        var b = new Account();
        Contention.Race(() => Withdrawals(b));
        Console.WriteLine("instance contention: balance + 3 * taken = " + (b.Balance + 3 * (2000 - failures)) + ", some thrown: " + (failures > 0) + ", locked after: " + Monitor.IsEntered(b));
        Console.WriteLine("other thread gets the instance lock: " + Contention.OtherThreadGets(b));
        failures = 0;
        Ledger.Take((int)Ledger.Total);                     // empty: the contended Take(3) throws out often
        long before = Ledger.Total;
        Contention.Race(Takes);
        Console.WriteLine("static contention: added - taken = " + (Ledger.Total - before + 3 * (2000 - failures) == 4000) + ", some thrown: " + (failures > 0));
        Console.WriteLine("other thread gets the static lock: " + Contention.OtherThreadGets(typeof(Ledger)));
    }
}
