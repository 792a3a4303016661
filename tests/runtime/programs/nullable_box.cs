// box of a Nullable<T> (ECMA-335 III.4.1): null when it has no value, else a boxed T -- never a
// boxed Nullable. Inside try/catch/finally so that llilc-eh compiles the methods (EH methods only).
using System;

struct Point { public int X, Y; public override string ToString() { return "(" + X + "," + Y + ")"; } }

static class NullableBox
{
    static object Box(int? v) { try { return v; } finally { Console.WriteLine("boxed " + (v.HasValue ? v.Value.ToString() : "none")); } }

    static object BoxPoint(Point? p) { try { object o = p; return o; } catch (Exception) { return "unreached"; } }

    static string Describe(object o)
    {
        try { return o == null ? "null" : o.GetType().FullName + " " + o; }
        finally { Console.Write(""); }
    }

    static string Constrained(long? v)
    {
        try { return v.GetHashCode() + " " + v.ToString() + " " + v.Equals(5L); }
        catch (NullReferenceException) { return "nre"; }
    }

    static string Call(int? v)
    {
        try { object o = v; return o.ToString(); }      // a box that may be null keeps its null check
        catch (NullReferenceException) { return "nre"; }
    }

    static int Unboxed(object o)
    {
        try { int? back = (int?)o; return back ?? -1; }
        catch (InvalidCastException) { return -2; }
    }

    static int Main()
    {
        Console.WriteLine(Describe(Box(null)));
        Console.WriteLine(Describe(Box(42)));
        Console.WriteLine(Describe(BoxPoint(null)));
        Console.WriteLine(Describe(BoxPoint(new Point { X = 3, Y = 4 })));
        Console.WriteLine(Box(null) == null);
        Console.WriteLine(Box(7) is int);
        Console.WriteLine(Constrained(null));
        Console.WriteLine(Constrained(5));
        Console.WriteLine(Call(null) + " " + Call(12));
        Console.WriteLine(Unboxed(Box(9)) + " " + Unboxed(Box(null)) + " " + Unboxed("x"));
        return 0;
    }
}
