// ldtoken in methods with EH (compiled by llilc-eh under `run`): typeof(T) (a RuntimeTypeHandle
// holding a RuntimeType), an array initializer (RuntimeHelpers.InitializeArray with a
// RuntimeFieldHandle), a method handle (MethodBase.GetMethodFromHandle via a delegate's
// Method) -- CoreCLR's handle structs hold managed objects, not the raw handles.
using System;
using System.Reflection;

static class Tokens
{
    static int Primes()
    {
        try
        {
            int[] p = { 3, 7, 11, 17, 23, 29, 37, 47, 59, 71 };
            int s = 0;
            foreach (int x in p) s += x;
            return s;
        }
        catch (Exception e) { Console.WriteLine("Primes caught " + e.GetType().Name); return -1; }
    }

    static string Types()
    {
        try { return typeof(string).Name + " " + typeof(int[]).Name + " " + typeof(Tokens).FullName; }
        finally { Console.WriteLine("Types finally"); }
    }

    static string Fields()
    {
        try
        {
            FieldInfo f = typeof(Tokens).GetField("counter", BindingFlags.NonPublic | BindingFlags.Static);
            RuntimeFieldHandle h = f.FieldHandle;
            return FieldInfo.GetFieldFromHandle(h).Name;
        }
        catch (Exception e) { return "caught " + e.GetType().Name; }
    }

    static int counter = 0;

    static void Main()
    {
        Console.WriteLine("Primes " + Primes());
        Console.WriteLine("Types " + Types());
        Console.WriteLine("Fields " + Fields());
        counter++;
    }
}
