// C# `when` filters that read and write locals and call methods, run in the first pass (before
// any finally of an inner frame), filters that decline, and a filter that throws (= declines).
using System;

static class Filters
{
    static int calls;

    static bool Log(string what, bool verdict) { calls++; Console.WriteLine("filter " + what + " -> " + verdict); return verdict; }

    static void Inner(int k)
    {
        try { throw new ArgumentException("arg" + k); }
        finally { Console.WriteLine("Inner finally (second pass) k=" + k); }
    }

    static int Run(int k)
    {
        int seen = 0;
        string tag = "t" + k;
        try
        {
            try { Inner(k); }
            catch (ArgumentException e) when (Log("inner " + tag + " " + e.Message, k % 2 == 0) && ++seen > 0)
            { Console.WriteLine("inner handler seen=" + seen); return seen * 10; }
        }
        catch (ArgumentException e) when (Log("outer " + tag, (seen += 5) > 0))
        { Console.WriteLine("outer handler seen=" + seen + " " + e.Message); return seen; }
        return -1;
    }

    static bool Bad(Exception e) { throw new NullReferenceException("from filter"); }

    static int Throwing()
    {
        try
        {
            try { throw new FormatException("fmt"); }
            catch (FormatException e) when (Bad(e)) { Console.WriteLine("never"); return 0; }
        }
        catch (FormatException e) { Console.WriteLine("outer got " + e.Message + " (filter exception swallowed)"); return 1; }
    }

    static int Main()
    {
        for (int k = 0; k < 4; k++) Console.WriteLine("Run(" + k + ") = " + Run(k));
        Console.WriteLine("Throwing() = " + Throwing());
        Console.WriteLine("filter calls " + calls);
        return 0;
    }
}
