// SysV struct passing (llilc_eh/reader/abi.py) on the real runtime: every method of T has EH and
// so is compiled by llilc-eh under `llilc-eh run`; Main (RyuJIT) and Calls (ours) call them, so
// structs cross the boundary both ways -- 8/16-byte INTEGER, two doubles, int+float, three floats
// (<2 x float> + float), 24 bytes (byval / return buffer), with references (barriers), register
// exhaustion (six integer arguments before a 16-byte struct), bool/byte/short extension.
using System;
public struct P { public int A; public int B; }
public struct Q { public long A; public long B; }
public struct R { public double X; public double Y; }
public struct M { public int A; public float B; }
public struct F3 { public float A; public float B; public float C; }
public struct Big { public long A; public long B; public long C; }
public struct S { public string O; public int I; }
public struct BigRef { public string O; public long A; public long B; }
public static class T {
    static object sink;
    public static P MakeP(int a, int b) { try { return new P { A = a, B = b }; } finally { sink = a; } }
    public static long SumP(P p) { try { return p.A + p.B; } catch (Exception) { return -1; } }
    public static Q MakeQ(long a, long b) { try { return new Q { A = a, B = b }; } finally { sink = b; } }
    public static long SumQ(long x1, long x2, long x3, long x4, long x5, Q q, long x6) { try { return x1 + x2 + x3 + x4 + x5 + q.A * 10 + q.B * 100 + x6 * 1000; } finally { sink = q.A; } }
    public static R MakeR(double x, double y) { try { return new R { X = x, Y = y }; } finally { sink = x; } }
    public static double SumR(R r, M m, F3 f) { try { return r.X + r.Y * 2 + m.A * 3 + m.B * 4 + f.A * 5 + f.B * 6 + f.C * 7; } finally { sink = r.X; } }
    public static Big MakeBig(long a) { try { return new Big { A = a, B = a + 1, C = a + 2 }; } finally { sink = a; } }
    public static long SumBig(Big b, Q q) { try { return b.A + b.B * 10 + b.C * 100 + q.A * 1000 + q.B * 10000; } finally { sink = b.A; } }
    public static S MakeS(string o, int i) { try { return new S { O = o, I = i }; } finally { sink = o; } }
    public static string ShowS(S s) { try { return s.O + ":" + s.I; } finally { sink = s.O; } }
    public static BigRef MakeBigRef(string o) { try { return new BigRef { O = o + "!", A = 5, B = 6 }; } finally { sink = o; } }
    public static bool IsSmall(byte b, short s) { try { return b < 10 && s > -5; } finally { sink = b; } }
    public static string Calls() {
        try {
            var p = MakeP(3, 4); var q = MakeQ(5, 6); var r = MakeR(1.5, 2.25);
            var big = MakeBig(7); var s = MakeS("str", 9); var br = MakeBigRef("big");
            GC.Collect();
            return SumP(p) + " " + SumQ(1, 2, 3, 4, 5, q, 6) + " " + SumR(r, new M { A = 2, B = 0.5f }, new F3 { A = 1, B = 2, C = 3 })
                + " " + SumBig(big, q) + " " + ShowS(s) + " " + br.O + br.A + br.B + " " + IsSmall(3, -2) + IsSmall(200, 0);
        } catch (Exception e) { return e.GetType().Name; }
    }
    public static void Main() {
        Console.WriteLine(Calls());
        var p = MakeP(1, 2); Console.WriteLine(p.A + " " + p.B + " " + SumP(p));
        var big = MakeBig(100); Console.WriteLine(big.A + " " + big.B + " " + big.C + " " + SumBig(big, MakeQ(1, 2)));
        Console.WriteLine(ShowS(MakeS("x", 1)) + " " + MakeBigRef("y").O + " " + SumR(MakeR(0.25, 0.5), new M { A = 1, B = 1 }, new F3 { A = 0.5f, B = 0.25f, C = 0.125f }));
    }
}
