// The framework's shared generic code over reference types, with exceptions through it: LINQ
// operators and collections instantiated over string / Version / a class of the program, a
// throwing selector unwinding through their finallys, a comparer that throws inside a sort.
using System;
using System.Collections.Concurrent;
using System.Collections.Generic;
using System.Linq;

class Item
{
    public string Name;
    public int Size;
    public override string ToString() { return Name + ":" + Size; }
}

class Program
{
    static int Count(string s)
    {
        if (s == "bad") throw new FormatException("bad item");
        return s.Length;
    }

    static IEnumerable<T> Gen<T>(List<T> items) where T : class
    {
        try
        {
            foreach (var w in items) { if (w.ToString() == "delta") throw new ArgumentException("delta"); yield return w; }
        }
        finally
        {
            Console.WriteLine("gen finally " + typeof(T).Name);
        }
    }

    static void Main()
    {
        var words = new List<string> { "alpha", "beta", "gamma", "delta", "beta", "epsilon" };
        Console.WriteLine(string.Join(",", words.Where(w => w.Length > 4).Select(w => w.ToUpperInvariant())));
        Console.WriteLine(string.Join(",", words.OrderBy(w => w).ThenByDescending(w => w.Length).Distinct()));
        Console.WriteLine(string.Join(";", words.GroupBy(w => w[0]).Select(g => g.Key + "=" + g.Count())));
        var dict = words.Distinct().ToDictionary(w => w, w => new Item { Name = w, Size = w.Length });
        Console.WriteLine(dict["gamma"] + " " + dict.Count);
        var lookup = words.ToLookup(w => w.Length);
        Console.WriteLine(string.Join(",", lookup[5]));
        try
        {
            var sizes = words.Concat(new[] { "bad" }).Select(Count).ToList();
            Console.WriteLine("no throw " + sizes.Count);
        }
        catch (FormatException e)
        {
            Console.WriteLine("caught " + e.Message);
        }
        try
        {
            var sorted = words.Select(w => new Item { Name = w, Size = w.Length }).ToArray();
            Array.Sort(sorted, Comparer<Item>.Create((a, b) =>
            {
                if (a.Name == "epsilon" || b.Name == "epsilon") throw new InvalidOperationException("no epsilon");
                return string.CompareOrdinal(a.Name, b.Name);
            }));
        }
        catch (InvalidOperationException e)
        {
            Console.WriteLine("sort: " + e.Message + " " + (e.InnerException != null ? e.InnerException.Message : "-"));
        }
        var concurrent = new ConcurrentDictionary<string, List<string>>();
        foreach (var w in words)
            concurrent.GetOrAdd(w.Substring(0, 1), _ => new List<string>()).Add(w);
        Console.WriteLine(string.Join(",", concurrent.OrderBy(p => p.Key).Select(p => p.Key + p.Value.Count)));
        var set = new HashSet<string>(words, StringComparer.OrdinalIgnoreCase);
        set.ExceptWith(new[] { "BETA" });
        Console.WriteLine(string.Join(",", set.OrderBy(s => s)));
        var lazy = new Lazy<Item>(() => new Item { Name = "lazy", Size = 1 });
        Console.WriteLine(lazy.Value + " " + Tuple.Create("t", new Version(5, 5)).Item2);
        try
        {
            var first = words.Where(w => w.StartsWith("z")).First();
            Console.WriteLine(first);
        }
        catch (InvalidOperationException e)
        {
            Console.WriteLine("first: " + e.GetType().Name);
        }
        try
        {
            Console.WriteLine(string.Join(",", Gen(words).Select(s => s + "!").ToList()));
        }
        catch (ArgumentException e)
        {
            Console.WriteLine("gen: " + e.Message);
        }
        Console.WriteLine(words.Aggregate("", (acc, w) => acc + w[0]) + " " + words.Max() + " " + words.Min(w => w.Length));
    }
}
