// What real code needs (issue 17 item 3), each inside try/catch/finally in methods llilc-eh
// compiles under `run`: interface dispatch (a class, a boxed struct, an interface method that
// throws, a default-less explicit implementation), statics with class init (precise .cctor and
// beforefieldinit), the SysV struct ABI at sizes sysv_structs.cs leaves out (1, 3, 12 bytes,
// double+long, long+double, float+int, 20 bytes by value in and out), P/Invoke through its stub
// (libc getpid/strlen with string marshalling, SetLastError), delegates (invoke, multicast,
// closed over a static method's first argument, a throwing target), localloc beside a catch
// and a finally, and value-type `this` (a struct's methods mutating their own fields across
// handlers). Every method with EH of this program is ours; Main checks nothing itself: the
// output is compared with RyuJIT's.
using System;
using System.Collections.Generic;
using System.Runtime.InteropServices;
using System.Threading.Tasks;

interface IShape { int Area(); string Name { get; } }
interface IFails { void Boom(int k); }

class Rect : IShape, IFails
{
    public int W, H;
    public int Area() => W * H;
    public string Name => "rect";
    void IFails.Boom(int k) { if (k > 0) throw new InvalidOperationException("boom " + k); }
}

struct Square : IShape
{
    public int S;
    public int Area() => S * S;
    public string Name => "square" + S;
}

class Precise { public static int V; static Precise() { Console.WriteLine("Precise .cctor"); V = 11; } }
class Relaxed { public static readonly string N = Make(); static string Make() { Console.WriteLine("Relaxed init"); return "relaxed"; } }

struct B1 { public byte A; }
struct B3 { public byte A, B, C; }
struct I3 { public int A, B, C; }
struct DL { public double X; public long Y; }
struct LD { public long Y; public double X; }
struct FI { public float F; public int I; }
struct L20 { public long A; public long B; public int C; }

struct Tally
{
    public int Count;
    public string Last;

    public int Bump(string what)
    {
        try
        {
            Count++;
            if (what == null) throw new ArgumentNullException("what");
            Last = what;
            return Count;
        }
        catch (ArgumentNullException) { Last = "<null>"; Count += 100; return -Count; }
        finally { Count += 1000; }
    }

    public override string ToString() => Count + "/" + Last;
}

static class Native
{
    [DllImport("libc", EntryPoint = "getpid")] public static extern int GetPid();
    [DllImport("libc", EntryPoint = "strlen", CharSet = CharSet.Ansi)] public static extern IntPtr StrLen(string s);
    [DllImport("libc", EntryPoint = "close", SetLastError = true)] public static extern int Close(int fd);
}

static class Ext { public static string Shout(this string s, int n) => s.ToUpperInvariant() + new string('!', n); }

static class Program
{
    static string Dispatch(IShape a, IShape b, IFails f)
    {
        string log = "";
        try
        {
            log += a.Name + "=" + a.Area() + " " + b.Name + "=" + b.Area();
            f.Boom(0);
            f.Boom(3);
            log += " not reached";
        }
        catch (InvalidOperationException e) { log += " caught " + e.Message; }
        finally { log += " finally"; }
        return log;
    }

    static string Statics(int k)
    {
        try
        {
            Console.WriteLine("before statics");
            if (k > 0) throw new Exception("k");
            return "no";
        }
        catch (Exception) { return "in catch " + Precise.V + " " + Relaxed.N; }
        finally { Console.WriteLine("statics finally " + Precise.V); }
    }

    static B1 MB1(byte a) { try { return new B1 { A = a }; } finally { Console.Write(""); } }
    static B3 MB3(byte a) { try { return new B3 { A = a, B = (byte)(a + 1), C = (byte)(a + 2) }; } finally { Console.Write(""); } }
    static I3 MI3(int a) { try { return new I3 { A = a, B = a * 2, C = a * 3 }; } finally { Console.Write(""); } }
    static DL MDL(double x, long y) { try { return new DL { X = x, Y = y }; } finally { Console.Write(""); } }
    static LD MLD(long y, double x) { try { return new LD { Y = y, X = x }; } finally { Console.Write(""); } }
    static FI MFI(float f, int i) { try { return new FI { F = f, I = i }; } finally { Console.Write(""); } }
    static L20 ML20(long a) { try { return new L20 { A = a, B = a + 1, C = (int)a + 2 }; } finally { Console.Write(""); } }

    static string Structs(B1 b1, B3 b3, I3 i3, DL dl, LD ld, FI fi, L20 l20, int tail)
    {
        try
        {
            if (tail < 0) throw new ArgumentException("tail");
            return b1.A + " " + b3.A + b3.B + b3.C + " " + (i3.A + i3.B + i3.C) + " " + dl.X + "/" + dl.Y + " "
                   + ld.Y + "/" + ld.X + " " + fi.F + "/" + fi.I + " " + (l20.A + l20.B + l20.C) + " " + tail;
        }
        catch (ArgumentException) { return "bad"; }
    }

    static string PInvoke()
    {
        try
        {
            bool pid = Native.GetPid() > 0;
            long len = (long)Native.StrLen("hello, world");
            int rc = Native.Close(-1);
            int err = Marshal.GetLastWin32Error();
            return "pid>0 " + pid + " strlen " + len + " close " + rc + " errno " + err;
        }
        catch (DllNotFoundException e) { return "no libc " + e.Message; }
        finally { Console.WriteLine("pinvoke finally"); }
    }

    static int counter;
    static int AddOne(int x) { counter += 1; return x + 1; }
    static int Twice(int x) { counter += 10; return x * 2; }
    static int Thrower(int x) { throw new NotSupportedException("delegate " + x); }

    static string Delegates()
    {
        Func<int, int> multi = AddOne;
        multi += Twice;
        Func<int, string> closed = "abc".Shout;            // closed over the static method's first argument
        Func<int, int> bad = Thrower;
        string log = "";
        try
        {
            log += multi(20) + " " + counter + " " + closed(2) + " ";
            Action a = () => log += "lambda ";
            a();
            log += bad(7);
        }
        catch (NotSupportedException e) { log += "caught " + e.Message; }
        finally { log += " count " + multi.GetInvocationList().Length; }
        return log;
    }

    static unsafe string Localloc(int n)
    {
        int* p = stackalloc int[n];
        string log = "";
        try
        {
            for (int i = 0; i < n; i++) p[i] = i * i;
            if (n > 4) throw new IndexOutOfRangeException("n=" + n);
            log += "sum " + (p[0] + p[n - 1]);
        }
        catch (IndexOutOfRangeException e)
        {
            log += e.Message + " last " + p[n - 1];
        }
        finally { log += " finally p1=" + p[1]; }
        return log;
    }

    static string ValueThis()
    {
        var t = new Tally();
        string log = "";
        try
        {
            log += t.Bump("a") + " ";
            log += t.Bump(null) + " ";
            log += t.ToString();
            Tally[] arr = new Tally[2];
            arr[1].Bump("in array");
            log += " arr " + arr[1];
        }
        finally { log += " end " + t.Count; }
        return log;
    }

    static string Tokens()
    {
        try
        {
            Type[] types = { typeof(void), typeof(IComparable<>), typeof(IEquatable<>), typeof(Dictionary<,>),
                             typeof(int).MakeByRefType() };
            string log = "";
            foreach (Type t in types) log += t.Name + (t.IsGenericTypeDefinition ? "<>" : "") + " ";
            return log + (typeof(void) == Type.GetType("System.Void"));
        }
        catch (Exception e) { return "tokens " + e.GetType().Name; }
    }

    static string Pool()
    {
        try
        {
            var t = Task.Run(() => { if (counter >= 0) throw new TimeoutException("in the pool"); return 1; });
            t.Wait();
            return "no";
        }
        catch (AggregateException e) { return "pool " + e.InnerException.Message; }
        finally { Task.Run(() => counter++).Wait(); }
    }

    static int Main()
    {
        Console.WriteLine(Dispatch(new Rect { W = 3, H = 4 }, new Square { S = 5 }, new Rect()));
        Console.WriteLine(Statics(1));
        Console.WriteLine(Structs(MB1(7), MB3(1), MI3(2), MDL(1.5, 9), MLD(8, 2.25), MFI(0.5f, 6), ML20(10), 99));
        Console.WriteLine(PInvoke());
        Console.WriteLine(Delegates());
        Console.WriteLine(Localloc(3));
        Console.WriteLine(Localloc(6));
        Console.WriteLine(ValueThis());
        Console.WriteLine(Tokens());
        Console.WriteLine(Pool());
        return 0;
    }
}
