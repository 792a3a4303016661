// Nested finallys on both paths inside loops, thousands of iterations: leave through finallys
// (break, continue, return, goto out of nested tries) and exceptions caught each iteration.
using System;

static class Loops
{
    static long total;

    static int Nested(int n)
    {
        int count = 0;
        for (int i = 0; i < n; i++)
        {
            try
            {
                try
                {
                    if (i % 7 == 0) continue;
                    if (i % 11 == 0) throw new InvalidOperationException();
                    count += 2;
                }
                finally { total += i; }
                if (i == n - 1) break;
            }
            catch (InvalidOperationException) { count -= 1; }
            finally { total ^= count; }
        }
        return count;
    }

    static int EarlyReturn(int n)
    {
        for (int i = 0; ; i++)
        {
            try { try { if (i == n) return i * 3; } finally { total++; } }
            finally { total += 2; }
        }
    }

    static int Searches(int[] data, int needle)
    {
        int found = -1;
        for (int i = 0; i < data.Length; i++)
        {
            try
            {
                for (int j = 0; j < 3; j++)
                {
                    try { if (data[i] + j == needle) { found = i * 10 + j; goto done; } }
                    finally { total += j; }
                }
            }
            finally { total += 100; }
        }
    done:
        return found;
    }

    static int Main()
    {
        int sum = 0;
        for (int r = 0; r < 40; r++) sum += Nested(1000 + r);
        Console.WriteLine("Nested sum " + sum + " total " + total);
        int e = 0;
        for (int i = 0; i < 5000; i++) e += EarlyReturn(i % 13);
        Console.WriteLine("EarlyReturn " + e + " total " + total);
        var data = new int[200];
        for (int i = 0; i < data.Length; i++) data[i] = i * 2;
        int s = 0;
        for (int k = 0; k < 500; k++) s += Searches(data, k);
        Console.WriteLine("Searches " + s + " total " + total);
        return 0;
    }
}
