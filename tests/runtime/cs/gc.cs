// GC.Collect() inside tries, filters, catch and finally handlers, with objects that only the
// frame of the EH method keeps alive; weak references tell whether they survived.
using System;
using System.Collections.Generic;

class Node { public int V; public Node Next; public Node(int v, Node n) { V = v; Next = n; } }

static class Gc
{
    static int Sum(Node n) { int s = 0; for (; n != null; n = n.Next) s += n.V; return s; }

    static bool Collect(string where) { GC.Collect(); GC.WaitForPendingFinalizers(); GC.Collect(); Console.WriteLine("collected in " + where); return true; }

    static int Run(int k)
    {
        Node list = null;
        for (int i = 0; i < 1000; i++) list = new Node(i, list);
        var keep = new List<string> { "x" + k };
        try
        {
            Collect("try");
            if (k > 0) throw new InvalidOperationException("k=" + k);
            return Sum(list);
        }
        catch (InvalidOperationException e) when (Collect("filter") && e.Message.Length > 0)
        {
            Collect("catch");
            for (int i = 0; i < 50000; i++) keep.Add(i.ToString());   // allocate while the handler runs
            return Sum(list) + keep.Count + e.Message.Length;
        }
        finally
        {
            Collect("finally");
            Console.WriteLine("finally sees " + Sum(list) + " " + keep[0]);
        }
    }

    static int Main()
    {
        for (int k = 0; k < 3; k++) Console.WriteLine("Run(" + k + ") = " + Run(k));
        return 0;
    }
}
