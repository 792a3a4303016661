// Value types and strings across calls into and out of methods with EH: small structs by value,
// a struct returned by value, a large struct, strings built in handlers.
using System;

struct Pair { public int A; public int B; public Pair(int a, int b) { A = a; B = b; } }
struct Big { public long X, Y, Z; public string S; }

static class Values
{
    static Pair Swap(Pair p)
    {
        try { if (p.A < 0) throw new ArgumentException("negative"); return new Pair(p.B, p.A); }
        catch (ArgumentException) { return new Pair(0, 0); }
    }

    static Big Make(long x, string s)
    {
        Big b = new Big();
        try { b.X = x; b.Y = checked(x * 1000000000000L); b.Z = x + 1; b.S = s; }
        catch (OverflowException) { b.S = s + "!overflow"; }
        finally { b.Z += 10; }
        return b;
    }

    static string Describe(Big b, Pair p, double d)
    {
        string r = "";
        try { r = b.S + ":" + b.X + "," + b.Y + "," + b.Z + " p=" + p.A + "/" + p.B + " d=" + d.ToString("R"); }
        finally { r = "<" + r + ">"; }
        return r;
    }

    static int Main()
    {
        Pair p = Swap(new Pair(3, 4));
        Console.WriteLine("Swap = " + p.A + "," + p.B);
        p = Swap(new Pair(-1, 4));
        Console.WriteLine("Swap = " + p.A + "," + p.B);
        Console.WriteLine(Describe(Make(7, "seven"), new Pair(1, 2), 2.5));
        Console.WriteLine(Describe(Make(70000000, "big"), new Pair(-3, 9), -0.125));
        return 0;
    }
}
