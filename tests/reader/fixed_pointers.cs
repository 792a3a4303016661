// `fixed` statements inside protected regions, as mcs compiles them (`mcs -unsafe`). For an
// array, mcs leaves a native int on one path (`ldc.i4.0; conv.u` when the array is null or
// empty) and a byref on the other (`ldelema`) and joins them before `stloc` of the pinned
// local: the native int / byref join CoreCLR's importer merges to a byref.
using System;

public static unsafe class FixedPointers
{
    static int Sum(byte[] data)
    {
        int sum = 0;
        try
        {
            fixed (byte* p = data)
            {
                for (int i = 0; data != null && i < data.Length; i++)
                    sum += p[i];
            }
        }
        finally
        {
            Console.WriteLine("Sum: finally");
        }
        return sum;
    }

    static int Count(int[] values, int stop)
    {
        int n = 0;
        try
        {
            fixed (int* p = values)
            {
                if (p == null)
                    throw new ArgumentNullException("values");
                while (p[n] != stop)
                    n++;
            }
        }
        catch (ArgumentNullException e) when (e.ParamName == "values")
        {
            Console.WriteLine("Count: filter handler");
            n = -1;
        }
        catch (IndexOutOfRangeException)
        {
            n = -2;
        }
        return n;
    }

    static long InHandler(long[] cells)
    {
        long total = 0;
        try
        {
            if (cells.Length < 2)
                throw new InvalidOperationException();
            total = cells[0];
        }
        catch (InvalidOperationException)
        {
            fixed (long* p = cells)
            {
                try
                {
                    for (long* q = p; q < p + cells.Length; q++)
                        total += *q;
                }
                finally
                {
                    Console.WriteLine("InHandler: inner finally");
                }
            }
        }
        return total;
    }

    static int Chars(string s)
    {
        int n = 0;
        try
        {
            fixed (char* p = s)
            {
                for (char* q = p; *q != '\0'; q++)
                    n++;
            }
        }
        finally
        {
            Console.WriteLine("Chars: finally");
        }
        return n;
    }

    public static void Main()
    {
        Console.WriteLine(Sum(new byte[] { 1, 2, 3 }));
        Console.WriteLine(Sum(new byte[0]));
        Console.WriteLine(Sum(null));
        Console.WriteLine(Count(new int[] { 5, 6, 7, 0 }, 0));
        Console.WriteLine(Count(null, 0));
        Console.WriteLine(Count(new int[0], 0));
        Console.WriteLine(InHandler(new long[] { 40 }));
        Console.WriteLine(InHandler(new long[] { 1, 2, 3 }));
        Console.WriteLine(Chars("abc"));
    }
}
