// The framework's generic code with EH over value types, exceptions crossing it: under
// `run --all-eh` these exact instantiations (Enumerable.Sum<int>, the Where/Select iterators'
// MoveNext and Dispose over long and a struct, HashSet<int>, SortedSet<double>, ToDictionary<int,...>)
// are compiled by llilc-eh, and a selector that throws unwinds through their try/finally (the
// enumerator's Dispose runs in our finally) to a catch in Main (tests/runtime/test_instantiations.py).
using System;
using System.Collections.Generic;
using System.Linq;

struct Point : IEquatable<Point>
{
    public int X;
    public double Y;
    public Point(int x, double y) { X = x; Y = y; }
    public bool Equals(Point o) { return X == o.X && Y == o.Y; }
    public override int GetHashCode() { return X * 31 + (int)Y; }
    public override string ToString() { return "(" + X + "," + Y + ")"; }
}

// an enumerable of ints whose enumerator says when it is disposed (by our finally, under --all-eh)
class Counted : IEnumerable<int>
{
    public static int Disposed;
    readonly int n;
    public Counted(int n) { this.n = n; }
    public IEnumerator<int> GetEnumerator()
    {
        try
        {
            for (int i = 0; i < n; i++)
                yield return i;
        }
        finally
        {
            Disposed++;
        }
    }
    System.Collections.IEnumerator System.Collections.IEnumerable.GetEnumerator() { return GetEnumerator(); }
}

static class Program
{
    static int Check(int x)
    {
        if (x == 7)
            throw new ArgumentOutOfRangeException("x", "seven");
        return x * 2;
    }

    static void Try(string what, Func<string> f)
    {
        try
        {
            Console.WriteLine(what + ": " + f());
        }
        catch (Exception e)
        {
            Console.WriteLine(what + ": " + e.GetType().Name + " (disposed " + Counted.Disposed + ")");
        }
    }

    static int Main()
    {
        var ints = new Counted(10);
        var longs = new List<long> { 5, 3, 9, 1, 7 };
        var points = new[] { new Point(1, 0.5), new Point(2, 1.5), new Point(1, 0.5), new Point(3, 2.5) };

        Try("Sum", () => ints.Sum().ToString());
        Try("Sum throws", () => ints.Sum(x => Check(x)).ToString());
        Try("Where/Select", () => string.Join(",", ints.Where(x => x % 3 == 0).Select(x => (long)x * x)));
        Try("Select throws", () => string.Join(",", ints.Select(Check).ToList()));
        Try("Max/Min", () => longs.Max() + " " + longs.Min() + " " + points.Max(p => p.Y));
        Try("Average", () => longs.Average().ToString());
        Try("Any/All", () => ints.Any(x => x > 8) + " " + ints.All(x => Check(x) >= 0));
        Try("Contains", () => ints.Contains(4) + " " + points.Contains(new Point(3, 2.5)));
        Try("SequenceEqual", () => ints.SequenceEqual(Enumerable.Range(0, 10)).ToString());
        Try("Single", () => ints.Single(x => x == 5).ToString());
        Try("Single throws", () => ints.Single(x => x > 5).ToString());
        Try("ElementAt", () => ints.ElementAt(6) + " " + ints.ElementAtOrDefault(60));
        Try("ToDictionary", () => string.Join(",", ints.ToDictionary(x => x, x => x * 0.5).Values));
        Try("ToDictionary dup", () => ints.ToDictionary(x => x % 4).Count.ToString());
        Try("Distinct points", () => string.Join(" ", points.Distinct()));
        Try("Zip", () => string.Join(",", ints.Zip(longs, (a, b) => a + b)));
        Try("SkipWhile/TakeWhile", () => string.Join(",", ints.SkipWhile(x => x < 3).TakeWhile(x => x < 8)));
        Try("Except/Intersect", () => string.Join(",", ints.Except(new[] { 1, 2, 3 })) + " / "
                                      + string.Join(",", ints.Intersect(new[] { 2, 4, 42 })));
        Try("Aggregate throws", () => ints.Aggregate(0, (a, x) => a + Check(x)).ToString());

        var hs = new HashSet<int>(ints);
        hs.UnionWith(new[] { 20, 21 });
        hs.ExceptWith(new[] { 0, 1 });
        hs.SymmetricExceptWith(new[] { 2, 30 });
        Console.WriteLine("HashSet: " + hs.Count + " " + hs.Overlaps(new[] { 30 }) + " " + hs.IsSupersetOf(new[] { 3, 4 }));
        var ss = new SortedSet<double> { 2.5, 1.5, 9.5 };
        ss.UnionWith(new[] { 0.5, 1.5 });
        ss.IntersectWith(new[] { 0.5, 1.5, 2.5, 7.0 });
        Console.WriteLine("SortedSet: " + string.Join(",", ss) + " " + ss.IsSubsetOf(new[] { 0.5, 1.5, 2.5, 3.5 }));
        Console.WriteLine("Disposed: " + Counted.Disposed);
        return 0;
    }
}
