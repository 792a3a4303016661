// Shared generic methods (code for every reference-type instantiation, the hidden MethodDesc
// argument) whose `catch (T)` the runtime resolves from the frame: from the main body, from
// inside a catch funclet and from inside a finally funclet (the runtime then follows the
// PSPSym to the parent frame), with `this` and a return value around the hidden argument,
// and beside a filter (WithFilter).
// Lookup<T> needs the instantiation in its body (typeof(T)): a runtime lookup through the
// context (declined when the metadata JIT-EE answers, which cannot give one).
using System;

class Program
{
    static int count;

    static void InCatch<T>(bool argument) where T : Exception
    {
        try
        {
            throw new InvalidOperationException("outer");
        }
        catch (InvalidOperationException)
        {
            try
            {
                if (argument) throw new ArgumentException("inner");
                throw new FormatException("inner");
            }
            catch (T)
            {
                Console.WriteLine("InCatch: caught by catch T inside a catch");
            }
        }
    }

    static void InFinally<T>(bool argument) where T : Exception
    {
        try
        {
            try
            {
                count++;
            }
            finally
            {
                try
                {
                    if (argument) throw new ArgumentException("in finally");
                    throw new FormatException("in finally");
                }
                catch (T)
                {
                    Console.WriteLine("InFinally: caught by catch T inside a finally");
                }
            }
        }
        catch (Exception)
        {
            Console.WriteLine("InFinally: caught by catch Exception");
        }
    }

    string name = "instance";

    string Instance<T>(int a, string b, long c) where T : Exception
    {
        try
        {
            if (a == 1) throw new ArgumentException(b);
            throw new FormatException(b);
        }
        catch (T)
        {
            return name + ": caught by catch T, " + a + " " + b + " " + c;
        }
        catch (Exception)
        {
            return name + ": caught by catch Exception, " + a + " " + b + " " + c;
        }
    }

    static bool Check(int a)
    {
        Console.WriteLine("WithFilter: filter sees " + a);
        return a > 0;
    }

    // a filter (an outlined function reaching the parent's frame by llvm.localrecover, its
    // slots escaped after the generic context's) beside catch (T)
    static void WithFilter<T>(int a) where T : Exception
    {
        int seen = a * 10;
        try
        {
            throw new FormatException();
        }
        catch (Exception) when (Check(seen))
        {
            Console.WriteLine("WithFilter: caught by the filter's handler " + seen);
        }
        catch (T)
        {
            Console.WriteLine("WithFilter: caught by catch T " + seen);
        }
    }

    static string Lookup<T>() where T : Exception
    {
        try
        {
            throw new ArgumentException();
        }
        catch (T)
        {
            return "Lookup: " + typeof(T).Name;
        }
        catch (Exception)
        {
            return "Lookup: catch Exception";
        }
    }

    static void Main()
    {
        try
        {
            InCatch<ArgumentException>(true);
            InCatch<Exception>(false);
            InCatch<ArgumentException>(false);
        }
        catch (Exception e)
        {
            Console.WriteLine("Main: " + e.GetType().Name + " escaped InCatch");
        }
        InFinally<ArgumentException>(true);
        InFinally<FormatException>(true);
        InFinally<Exception>(false);
        var p = new Program();
        Console.WriteLine(p.Instance<ArgumentException>(1, "b", 3L));
        Console.WriteLine(p.Instance<ArgumentException>(2, "b", 4L));
        Console.WriteLine(p.Instance<FormatException>(2, "b", 5L));
        WithFilter<FormatException>(1);
        WithFilter<FormatException>(0);
        try
        {
            WithFilter<ArgumentException>(0);
        }
        catch (FormatException)
        {
            Console.WriteLine("Main: FormatException escaped WithFilter");
        }
        Console.WriteLine(Lookup<ArgumentException>());
        Console.WriteLine(Lookup<FormatException>());
        Console.WriteLine("count " + count);
    }
}
