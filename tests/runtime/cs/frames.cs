// Exceptions crossing several frames: methods with EH (compiled by llilc-eh under `run`) call
// methods without EH (compiled by RyuJIT) and back, so unwinding passes through both JITs' frames.
using System;

class MyError : Exception { public int Code; public MyError(int c) : base("my error " + c) { Code = c; } }

static class Frames
{
    static int depth;

    static void Thrower(int n) { if (n == 0) throw new MyError(depth); depth++; Thrower(n - 1); }   // no EH: RyuJIT

    static int Middle(int n)   // EH: ours
    {
        try { Thrower(n); return -1; }
        finally { Console.WriteLine("Middle finally n=" + n + " depth=" + depth); }
    }

    static int Plain(int n) { return Middle(n) + 1; }   // no EH

    static int Outer(int n)
    {
        try { return Plain(n); }
        catch (MyError e) when (e.Code > 100) { Console.WriteLine("Outer: big code"); return -2; }
        catch (MyError e) { Console.WriteLine("Outer caught " + e.Message); return e.Code; }
    }

    static int Recurse(int n)
    {
        try
        {
            if (n == 0) throw new InvalidOperationException("bottom");
            return Recurse(n - 1) + 1;
        }
        catch (ArgumentException) { Console.WriteLine("never"); return 0; }
        finally { if (n % 3 == 0) Console.WriteLine("Recurse finally " + n); }
    }

    static int Main()
    {
        for (int i = 0; i < 4; i++) { depth = 0; Console.WriteLine("Outer(" + i + ") = " + Outer(i)); }
        try { Recurse(7); }
        catch (InvalidOperationException e) { Console.WriteLine("Main caught " + e.Message); }
        try { Middle(2); }
        catch (Exception e) { Console.WriteLine("Main caught " + e.GetType().Name + ": " + e.Message); }
        return 3;
    }
}
