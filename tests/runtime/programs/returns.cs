// Methods with EH returning every kind of value the GC info's ReturnKind distinguishes
// (the runtime reads it when it hijacks a return address to suspend a thread): a scalar,
// an object reference, a value type in one register with a reference, in two registers
// (reference second, both references, reference first), and through the return buffer.
using System;

struct RefInt { public string S; public int N; }          // eightbytes: ref, int   -> OBJECT
// CoreCLR lays a struct holding references out automatically: references first, embedded
// structs last -- so {long; string} would be (ref, int); the embedded OneRef goes second
struct IntRef { public OneRef S; public long N; }         // eightbytes: int, ref   -> SCALAR_OBJ
struct RefRef { public string A; public object B; }       // eightbytes: ref, ref   -> OBJ_OBJ
struct OneRef { public string S; }                        // one eightbyte: ref     -> OBJECT
struct Big { public string A; public long B; public long C; }   // 24 bytes: buffer -> SCALAR

static class Returns
{
    static int calls;
    static void Maybe(int i) { calls++; if (i % 3 == 0) throw new InvalidOperationException("x" + i); }

    static int Scalar(int i) { try { Maybe(i); return i; } catch (InvalidOperationException) { return -i; } }
    static string Text(int i) { try { Maybe(i); return "t" + i; } catch (InvalidOperationException e) { return e.Message; } }
    static object Boxed(int i) { try { Maybe(i); return i; } finally { calls += 10; } }
    static RefInt MakeRefInt(int i) { try { Maybe(i); return new RefInt { S = "r" + i, N = i }; } catch (Exception) { return new RefInt { S = "c", N = -1 }; } }
    static IntRef MakeIntRef(int i) { try { Maybe(i); return new IntRef { N = i, S = new OneRef { S = "i" + i } }; } catch (Exception) { return new IntRef { N = -2, S = new OneRef { S = "d" } }; } }
    static RefRef MakeRefRef(int i) { try { Maybe(i); return new RefRef { A = "a" + i, B = i }; } catch (Exception) { return new RefRef { A = "e", B = null }; } }
    static OneRef MakeOneRef(int i) { try { Maybe(i); return new OneRef { S = "o" + i }; } catch (Exception) { return new OneRef { S = "f" }; } }
    static Big MakeBig(int i) { try { Maybe(i); return new Big { A = "b" + i, B = i, C = 2 * i }; } catch (Exception) { return new Big { A = "g", B = -3, C = -4 }; } }

    static int Main()
    {
        for (int i = 1; i <= 4; i++)
        {
            object b = null;
            try { b = Boxed(i); } catch (InvalidOperationException) { b = "caught"; }
            RefInt ri = MakeRefInt(i); IntRef ir = MakeIntRef(i); RefRef rr = MakeRefRef(i);
            OneRef or = MakeOneRef(i); Big big = MakeBig(i);
            GC.Collect();
            Console.WriteLine($"{Scalar(i)} {Text(i)} {b} {ri.S}/{ri.N} {ir.N}/{ir.S.S} {rr.A}/{rr.B} {or.S} {big.A}/{big.B}/{big.C}");
        }
        Console.WriteLine(calls);
        return 0;
    }
}
