// Iterators (their MoveNext holds try/fault and finallys) and `using` (try/finally calling Dispose):
// early exit from foreach runs the iterator's finally through Dispose; exceptions inside using.
using System;
using System.Collections.Generic;

class Res : IDisposable
{
    readonly string name;
    public Res(string n) { name = n; Console.WriteLine("open " + n); }
    public void Dispose() { Console.WriteLine("dispose " + name); }
}

static class Iterators
{
    static IEnumerable<int> Numbers(int n)
    {
        using (new Res("numbers"))
        {
            try
            {
                for (int i = 0; i < n; i++)
                {
                    if (i == 5) throw new InvalidOperationException("five");
                    yield return i * i;
                }
            }
            finally { Console.WriteLine("Numbers finally"); }
        }
    }

    static int Sum(int n, int stopAt)
    {
        int s = 0;
        try
        {
            foreach (int x in Numbers(n)) { if (x >= stopAt) break; s += x; }
        }
        catch (InvalidOperationException e) { Console.WriteLine("Sum caught " + e.Message); s = -s; }
        return s;
    }

    static int Using(int k)
    {
        using (var a = new Res("a" + k))
        using (var b = new Res("b" + k))
        {
            if (k == 1) throw new ArgumentException("inside using");
            return k;
        }
    }

    static int Main()
    {
        Console.WriteLine("Sum(4, 100) = " + Sum(4, 100));
        Console.WriteLine("Sum(10, 9) = " + Sum(10, 9));
        Console.WriteLine("Sum(10, 100) = " + Sum(10, 100));
        for (int k = 0; k < 3; k++)
        {
            try { Console.WriteLine("Using(" + k + ") = " + Using(k)); }
            catch (ArgumentException e) { Console.WriteLine("caught " + e.Message); }
        }
        return 0;
    }
}
