// Throws inside finally, catch and filter bodies: the new exception replaces the old one, the
// enclosing handlers see it, and finallys of the abandoned dispatch still run in order.
using System;

static class HandlersThrow
{
    static bool Check(Exception e, string where)
    {
        Console.WriteLine("filter at " + where + " sees " + e.Message);
        if (where == "throwing") throw new InvalidOperationException("filter's own");
        return e.Message.StartsWith("from");
    }

    static void FromFinally()
    {
        try { throw new ArgumentException("original"); }
        finally { Console.WriteLine("finally throws"); throw new FormatException("from finally"); }
    }

    static void FromCatch()
    {
        try { throw new ArgumentException("first"); }
        catch (ArgumentException e) { Console.WriteLine("catch of " + e.Message + " throws"); throw new FormatException("from catch"); }
        finally { Console.WriteLine("FromCatch finally"); }
    }

    static int Run(int which)
    {
        try
        {
            try
            {
                if (which == 0) FromFinally();
                if (which == 1) FromCatch();
                if (which == 2) throw new ArgumentException("plain");
            }
            catch (Exception e) when (Check(e, which == 2 ? "throwing" : "inner")) { Console.WriteLine("inner got " + e.Message); return 1; }
            finally { Console.WriteLine("Run finally " + which); }
        }
        catch (Exception e) { Console.WriteLine("outer got " + e.GetType().Name + " " + e.Message); return 2; }
        return 0;
    }

    static int Main()
    {
        for (int i = 0; i < 3; i++) Console.WriteLine("Run(" + i + ") = " + Run(i));
        return 0;
    }
}
