// Statics of value types on the real runtime: CoreCLR keeps a static of a (non-primitive) struct
// boxed on the GC heap, and getFieldAddress (our data cell) gives the slot of the box reference;
// the struct with a string is written through the write barriers. H is initialised by Main
// before Run (compiled by llilc-eh) is, so no class-initialisation helper is needed.
using System;
public struct S { public string Name; public long N; }
public struct Plain { public int A; public int B; }
public static class H { public static S s; public static Plain p; public static int counter; public static string text; }
public static class G {
    static int Run(int k) {
        try {
            H.s.Name = "n" + k; H.s.N = k * 10; H.p.A = k; H.p.B = k + 1; H.counter += k; H.text = "t" + k;
            if (k > 1) throw new Exception("x");
            return (int)H.s.N + H.p.A + H.p.B + H.counter;
        } catch (Exception e) {
            H.s = new S { Name = e.Message, N = 99 };
            return (int)H.s.N;
        } finally { Console.WriteLine(H.s.Name + " " + H.s.N + " " + H.p.A + " " + H.p.B + " " + H.counter + " " + H.text); }
    }
    public static void Main() { H.counter = 1; for (int k = 0; k < 3; k++) Console.WriteLine(Run(k)); GC.Collect(); Console.WriteLine(H.s.Name + H.s.N + H.p.B); }
}
