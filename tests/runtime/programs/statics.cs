// Static fields in methods with EH (compiled by llilc-eh under `run`): classes whose static
// constructor has not run yet when our code first touches them -- explicit (precise) static
// constructors that print, beforefieldinit initialisers, statics of struct type, statics read
// in a catch and written in a finally. The static constructors must run, once, before the
// access, in the order RyuJIT's code runs them.
using System;

struct Point { public int X, Y; public Point(int x, int y) { X = x; Y = y; } }

class Precise
{
    public static int Value;
    static Precise() { Console.WriteLine("Precise cctor"); Value = 42; }
}

class Lazy
{
    public static readonly string Name = Make();
    static string Make() { Console.WriteLine("Lazy initialiser"); return "lazy"; }
}

class Shapes
{
    public static Point Origin = new Point(3, 4);
    static Shapes() { Console.WriteLine("Shapes cctor"); }
}

static class Counter { public static int Hits; }

static class Statics
{
    static int ReadPrecise()
    {
        try { Console.WriteLine("before Precise"); return Precise.Value; }
        finally { Counter.Hits++; }
    }

    static string InCatch(int k)
    {
        try { if (k > 0) throw new InvalidOperationException("k"); return "no throw"; }
        catch (InvalidOperationException) { Console.WriteLine("catch reads Lazy"); return Lazy.Name + k; }
        finally { Counter.Hits += 10; }
    }

    static int Struct()
    {
        try { Console.WriteLine("before Shapes"); Shapes.Origin.X += 1; return Shapes.Origin.X * 10 + Shapes.Origin.Y; }
        catch (Exception e) { Console.WriteLine(e.Message); return -1; }
    }

    static void Main()
    {
        Console.WriteLine("ReadPrecise " + ReadPrecise());
        Console.WriteLine("ReadPrecise " + ReadPrecise());
        Console.WriteLine("InCatch " + InCatch(0));
        Console.WriteLine("InCatch " + InCatch(1));
        Console.WriteLine("Struct " + Struct());
        Console.WriteLine("Hits " + Counter.Hits);
    }
}
