// Exact (unshared) generic instantiations with EH: code of its own per value-type instantiation,
// in which !0 / !!0 are known types (tests/runtime/test_instantiations.py).
// Each generic method below is compiled once per value type it is used with: a struct with
// fields of T (their offsets depend on T), T-typed locals and arguments, box / constrained
// calls / ldelem / stelem / newarr of T, calls to other instantiations, an iterator over ints.
using System;
using System.Collections.Generic;
using System.Linq;

struct Pair<T>
{
    public T A;
    public T B;
    public int Tag;

    public Pair(T a, T b, int tag) { A = a; B = b; Tag = tag; }

    // B's and Tag's offsets depend on T: a wrong binding reads the wrong bytes
    public T Pick(bool first)
    {
        try
        {
            if (Tag < 0)
                throw new InvalidOperationException("negative tag " + Tag);
            return first ? A : B;
        }
        catch (InvalidOperationException e)
        {
            Console.WriteLine("Pick caught: " + e.Message);
            return default(T);
        }
        finally
        {
            Program.Finallies++;
        }
    }

    public override string ToString() { return "(" + A + ", " + B + ", #" + Tag + ")"; }
}

struct Measure
{
    public long Ticks;
    public byte Unit;
    public Measure(long t, byte u) { Ticks = t; Unit = u; }
    public override string ToString() { return Ticks + "u" + Unit; }
}

// a T holding an object reference: Pair<Named> is laid out by CoreCLR's auto layout (Tag first)
struct Named
{
    public long Id;
    public string Name;
    public Named(long id, string name) { Id = id; Name = name; }
    public override string ToString() { return Name + "#" + Id; }
}

// two nested value types of one name: a type argument the runtime names without its enclosing type
class Left { public struct Item { public int A; public override string ToString() { return "Left.Item " + A; } } }
class Right { public struct Item { public long B; public string S; public override string ToString() { return "Right.Item " + B + S; } } }

struct Ordered : IComparable<Ordered>
{
    public int Key;
    public Ordered(int key) { Key = key; }
    public int CompareTo(Ordered other) { return Key.CompareTo(other.Key); }
}

class Growing<T>
{
    T[] items = new T[1];
    int count;
    public int Version;

    // newarr/stelem/ldelem of T, a finally around the growth
    public void Add(T x)
    {
        try
        {
            if (count == items.Length)
            {
                T[] bigger = new T[items.Length * 2];
                Array.Copy(items, bigger, count);
                items = bigger;
            }
            items[count++] = x;
        }
        finally
        {
            Version++;
        }
    }

    public T Get(int i)
    {
        try
        {
            return items[i];
        }
        catch (IndexOutOfRangeException)
        {
            Console.WriteLine("Get: index " + i + " out of range (count " + count + ")");
            return default(T);
        }
    }

    public int Count { get { return count; } }
}

// statics of an exact instantiation (one set per T, a class constructor each), one of type T
class Registry<T>
{
    public static int Hits;
    public static T Last;
    public static readonly string Name = "Registry<" + typeof(T).Name + ">";
    static Registry() { Console.WriteLine("cctor " + typeof(T).Name); }

    public static void Note(T value, bool fail)
    {
        try
        {
            Hits++;
            if (fail)
                throw new InvalidOperationException(Name);
            Last = value;
        }
        catch (InvalidOperationException e)
        {
            Console.WriteLine("caught in " + e.Message + " hits " + Hits);
        }
        finally
        {
            Hits += 10;
        }
    }
}

static class Program
{
    public static int Finallies;

    // box !!0, a constrained call on !!0, typeof(!!0), a T local across the handlers
    static string Describe<T>(T value, int divisor)
    {
        T kept = value;
        try
        {
            object boxed = value;
            int q = 100 / divisor;
            return boxed.GetType().Name + ":" + kept.ToString() + "/" + q;
        }
        catch (DivideByZeroException)
        {
            return "div0 " + typeof(T).Name + " " + kept;
        }
        finally
        {
            Finallies++;
        }
    }

    // a call to another instantiation (Pair<T>.Pick, Describe<T>) from inside a try
    static T Second<T>(Pair<T> p, int divisor)
    {
        try
        {
            Console.WriteLine("Second: " + Describe(p.B, divisor) + " of " + p);
            return p.Pick(false);
        }
        catch (Exception e)
        {
            Console.WriteLine("Second caught " + e.GetType().Name);
            throw;
        }
    }

    // unbox.any !!0 over Nullable<T>: null gives a Nullable without a value (CORINFO_HELP_UNBOX_NULLABLE)
    static T Unbox<T>(object o)
    {
        try
        {
            return (T)o;
        }
        catch (InvalidCastException)
        {
            Console.WriteLine("Unbox<" + typeof(T).Name + "> of " + (o == null ? "null" : o.GetType().Name)
                              + ": InvalidCastException");
            return default(T);
        }
    }

    // an iterator over T (its MoveNext is a method of a generic class) with a catch inside
    static IEnumerable<T> Checked<T>(T[] xs, int bad)
    {
        for (int i = 0; i < xs.Length; i++)
        {
            T x;
            try
            {
                if (i == bad)
                    throw new FormatException("bad element " + i);
                x = xs[i];
            }
            catch (FormatException e)
            {
                Console.WriteLine("Checked caught: " + e.Message);
                continue;
            }
            yield return x;
        }
    }

    static int Main()
    {
        var pi = new Pair<int>(3, 4, 7);
        var pl = new Pair<long>(5000000000L, -6, 8);
        var pb = new Pair<byte>(200, 201, 9);
        var pm = new Pair<Measure>(new Measure(10, 1), new Measure(20, 2), 10);
        Console.WriteLine("Pick: " + pi.Pick(true) + " " + pi.Pick(false) + " " + pl.Pick(false) + " "
                          + pb.Pick(false) + " " + pm.Pick(false));
        var pn = new Pair<Named>(new Named(1, "one"), new Named(2, "two"), 11);
        Console.WriteLine("Pick named: " + pn.Pick(true) + " " + pn.Pick(false) + " "
                          + Describe(new Named(3, "three"), 0) + " " + Second(pn, 3));
        var neg = new Pair<long>(1, 2, -1);
        Console.WriteLine("Pick neg: " + neg.Pick(true));

        Console.WriteLine(Describe(42, 5));
        Console.WriteLine(Describe(7L, 0));
        Console.WriteLine(Describe(new Measure(99, 3), 4));
        Console.WriteLine(Describe(2.5, 0));

        Console.WriteLine("Second<int>: " + Second(pi, 2));
        Console.WriteLine("Second<byte>: " + Second(pb, 0));
        try
        {
            Second(new Pair<Measure>(default(Measure), default(Measure), -5), 1);
        }
        catch (Exception e)
        {
            Console.WriteLine("Main: " + e.GetType().Name);
        }

        var gi = new Growing<int>();
        var gm = new Growing<Measure>();
        for (int i = 0; i < 9; i++)
        {
            gi.Add(i * i);
            gm.Add(new Measure(i, (byte)(i + 1)));
        }
        Console.WriteLine("Growing: " + gi.Count + " v" + gi.Version + " " + gi.Get(8) + " " + gi.Get(9)
                          + " " + gm.Get(3) + " " + gm.Get(-1));

        int sum = 0;
        foreach (int x in Checked(new[] { 1, 2, 3, 4, 5 }, 2))
            sum += x;
        long lsum = 0;
        foreach (long x in Checked(new[] { 10L, 20L, 30L }, 0))
            lsum += x;
        Console.WriteLine("Checked: " + sum + " " + lsum);

        // framework instantiations over value types (under --all-eh: List<int>, Dictionary<int,long>)
        var list = new List<int>();
        for (int i = 0; i < 40; i++)
            list.Add((i * 37) % 41);
        list.Sort();
        var dict = new Dictionary<int, long>();
        for (int i = 0; i < 50; i++)
            dict[i * 3] = (long)i * i;
        long total = 0;
        foreach (var kv in dict)
            total += kv.Key + kv.Value;
        Console.WriteLine("List: " + list[0] + " " + list[39] + " Dictionary: " + dict.Count + " " + total);
        // generic framework code with EH over value types: String.JoinCore<int>, Enumerable.Count<int>,
        // TryGetFirst<int>, LinkedList<int>..ctor, Set<int>.UnionWith, Lookup<int,int>.Create,
        // GenericArraySortHelper<Measure2>.Sort
        IEnumerable<int> lazy = list.Where(x => x % 2 == 0);
        Console.WriteLine("Join: " + string.Join(",", lazy.Take(5)) + " Count: " + lazy.Count()
                          + " First: " + lazy.First(x => x > 20));
        var linked = new LinkedList<int>(lazy);
        Console.WriteLine("Linked: " + linked.Count + " " + linked.First.Value + " " + linked.Last.Value);
        Console.WriteLine("Union: " + string.Join(",", new[] { 3, 1, 3, 2 }.Union(new[] { 2, 5 })));
        var lookup = list.ToLookup(x => x % 3);
        Console.WriteLine("Lookup: " + lookup.Count + " " + lookup[1].Count());
        var sorted = new[] { new Ordered(5), new Ordered(-2), new Ordered(9), new Ordered(0) };
        Array.Sort(sorted);
        Console.WriteLine("Sorted: " + string.Join(" ", sorted.Select(o => o.Key)));

        int? none = Unbox<int?>(null);
        Console.WriteLine("Unbox: " + none.HasValue + " " + Unbox<int?>(3) + " " + Unbox<long?>(9L) + " "
                          + Unbox<int>(4) + " " + Unbox<int?>("x")
                          + " " + Describe<int?>(8, 2) + " " + Describe(new KeyValuePair<int, long>(1, 2), 3));

        var items = new List<int> { 4, 5 };
        Console.WriteLine("Nested: " + Describe(new Left.Item { A = 1 }, 1) + " " + Describe(new Right.Item { B = 2, S = "x" }, 0)
                          + " " + Describe(items.GetEnumerator(), 2));

        Registry<int>.Note(5, false);
        Registry<int>.Note(6, true);
        Registry<Measure>.Note(new Measure(4, 4), false);
        Registry<long>.Note(7, true);
        Console.WriteLine("Registry: " + Registry<int>.Hits + " " + Registry<int>.Last + " " + Registry<Measure>.Hits
                          + " " + Registry<Measure>.Last + " " + Registry<long>.Hits + " " + Registry<long>.Last);

        Console.WriteLine("Finallies: " + Finallies);
        return 0;
    }
}
