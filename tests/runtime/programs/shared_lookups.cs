// Shared generic code whose bodies depend on the instantiation: every handle found at run time
// through the generic context (runtime lookups), in the main body, in catch, finally and filter
// funclets. Three kinds of context:
//   Lookups.Method<T>        a shared generic method: the hidden MethodDesc argument
//   Holder<T>.Make           a static method of a generic class: the hidden MethodTable argument
//   Holder<T>.Describe       an instance method of a generic class: `this`
//   Pair<T>.Show             a generic struct's method: the hidden MethodTable argument
//   Guard<E>.Run / RunStatic catch (E) through `this` / the MethodTable the GC info reports
//   Lookups.Delegates<T>     ldftn of Tell<T> and Tell<T[]>: a looked-up entry point
//   Lookups.Mixed<T,V>       shared in T, exact in a value type V (int, long, a 16-byte struct,
//                            KeyValuePair<string,int>: itself shared, KeyValuePair<__Canon,int>)
// Uses: typeof(T), typeof(T[]), typeof(List<T>), new List<T>, new T[n], castclass/isinst T,
// unbox.any T, calls into Holder<T> (static: its class looked up; generic method: its
// MethodDesc looked up), static fields of Holder<T>, a struct enumerator of List<T>, a
// constrained call on T, catch (T) beside them. Each is called with several instantiations
// (string, Exception, Version) so a wrong dictionary slot shows in the output.
using System;
using System.Collections.Generic;

class Holder<T> where T : class
{
    public static int Count;
    public static string Tag = "tag:" + typeof(T).Name;
    readonly T value;

    public Holder(T value) { this.value = value; }

    // context: `this`
    public string Describe(object o)
    {
        string r = "";
        try
        {
            if (o is T) r += "is " + typeof(T).Name;
            T c = (T)o;
            r += " cast " + (c == value);
        }
        catch (InvalidCastException)
        {
            r += " not a " + typeof(T).Name + " " + new List<T>().Count;
        }
        finally
        {
            Count++;
            r += " [" + typeof(Holder<T>).Name + " " + typeof(T[]).Name + "]";
        }
        return r;
    }

    // context: the hidden MethodTable; a filter that calls a generic method
    public static List<T> Make(int n, T item)
    {
        var list = new List<T>();
        try
        {
            for (int i = 0; i < n; i++) list.Add(item);
            T[] array = new T[n];
            list.CopyTo(array);
            if (n > 2) throw new ArgumentException("too many " + typeof(T).Name + " " + array.Length);
        }
        catch (ArgumentException e) when (Lookups.Accept<T>(e, n))
        {
            Console.WriteLine("Make: filtered " + typeof(T).Name + " " + list.Count + " " + e.Message);
        }
        finally
        {
            Count += 10;
            Console.WriteLine("Make: finally " + Tag + " " + Count);
        }
        return list;
    }
}

struct Pair<T> where T : class
{
    public T First;
    public int Second;

    // context: the hidden MethodTable (a value type's method)
    public string Show()
    {
        try
        {
            if (Second < 0) throw new InvalidOperationException(typeof(T).Name);
            return typeof(T).Name + "=" + First + "/" + Second;
        }
        catch (InvalidOperationException e)
        {
            return "negative " + e.Message + " " + typeof(Pair<T>).Name;
        }
    }
}

// catch (E) in shared code of a generic class: the runtime resolves E per frame through the
// context the GC info reports -- `this` (instance method) or the MethodTable (static method)
class Guard<E> where E : Exception
{
    readonly string name;

    public Guard(string name) { this.name = name; }

    static void Throw(int n)
    {
        if (n == 1) throw new FormatException("format");
        if (n == 2) throw new ArgumentException("argument");
    }

    public string Run(int n)
    {
        try
        {
            Throw(n);
            return name + ": nothing thrown";
        }
        catch (E e)
        {
            return name + ": caught " + e.GetType().Name + " as " + typeof(E).Name;
        }
        catch (Exception e)
        {
            return name + ": not an " + typeof(E).Name + ": " + e.GetType().Name;
        }
    }

    public static string RunStatic(int n)
    {
        try
        {
            Throw(n);
            return "static: nothing thrown";
        }
        catch (E e)
        {
            return "static: caught " + e.GetType().Name + " as " + typeof(E).Name;
        }
        catch (Exception e)
        {
            return "static: not an " + typeof(E).Name + ": " + e.GetType().Name;
        }
    }
}

struct Measure
{
    public long Count;
    public double Weight;

    public override string ToString() { return Count + "x" + Weight; }
}

static class Lookups
{
    public static bool Accept<T>(Exception e, int n)
    {
        Console.WriteLine("Accept<" + typeof(T).Name + ">(" + n + ")");
        return n % 2 == 1;
    }

    static string Inner<T, U>(object o) where T : class where U : class
    {
        try
        {
            return typeof(T).Name + "+" + typeof(U).Name + ":" + (o as T != null);
        }
        finally
        {
            Holder<T>.Count += 100;
        }
    }

    static string Join<T>(List<T> items)
    {
        string r = "";
        try
        {
            foreach (T item in items) r += item.ToString() + ";";      // a struct enumerator, constrained call
        }
        finally
        {
            r += "#" + items.Count;
        }
        return r;
    }

    // context: the hidden MethodDesc
    public static string Method<T>(object o) where T : class
    {
        string r = "";
        try
        {
            r += typeof(T).Name;
            var list = new List<T>();
            list.Add(o as T);
            T[] array = new T[3];
            r += " " + array.GetType().Name + list.Count;
            Holder<T>.Count++;
            r += " " + Holder<T>.Tag;
            r += " " + Inner<T, string>(o);
            var holder = new Holder<T>((T)o);
            r += " " + holder.Describe(o);
            throw new InvalidOperationException(r);
        }
        catch (InvalidOperationException e)
        {
            try
            {
                r = "caught " + typeof(T).Name + ":" + e.Message.Length;
                object boxed = 42;
                T t = (T)boxed;
                r += " unexpected " + t;
            }
            catch (InvalidCastException)
            {
                r += " ice " + typeof(T[]).Name;
            }
        }
        finally
        {
            Console.WriteLine("Method: finally " + typeof(List<T>).Name + " " + Holder<T>.Count);
        }
        return r;
    }

    // shared for every reference type T, exact in V (a value type): Mixed<__Canon,int> and
    // Mixed<__Canon,Measure> are code of their own, in which V is laid out exactly
    public static string Mixed<T, V>(T item, V value) where T : class where V : struct
    {
        string r = typeof(T).Name + "/" + typeof(V).Name;
        try
        {
            var map = new Dictionary<T, V>();
            map[item] = value;
            V[] array = new V[2];
            array[1] = map[item];
            object boxed = array[1];
            r += " " + boxed + " " + map.Count + " " + array[0];
            if (boxed.ToString().Length > 3) throw new ArgumentException(boxed.ToString());
        }
        catch (ArgumentException e) when (e.Message.Length > 4)
        {
            r += " long " + e.Message;
        }
        finally
        {
            // (not GetHashCode: a struct's hash mixes a type id the runtime numbers as types ask,
            // which differs under the alt JIT even in RyuJIT's code -- measured)
            r += " " + value.ToString().Length + " " + value.Equals(value);
        }
        return r;
    }

    static string Tell<T>(object o) { return typeof(T).Name + ":" + o; }

    // ldftn of Tell<T> from shared code: its entry point is looked up (an instantiating stub)
    public static string Delegates<T>(object o) where T : class
    {
        string r = "";
        try
        {
            Func<object, string> tell = Tell<T>;
            r = tell(o);
            if (o is T) throw new InvalidCastException(tell("again"));
        }
        catch (InvalidCastException e)
        {
            Func<object, string> inner = Tell<T[]>;
            r += " " + e.Message + " " + inner(r.Length);
        }
        return r;
    }

    public static string Catch<T>(Exception thrown) where T : Exception
    {
        try
        {
            throw thrown;
        }
        catch (T e)
        {
            return "caught as " + typeof(T).Name + ": " + e.Message + " " + new List<T> { e }.Count;
        }
        catch (Exception e)
        {
            return "not a " + typeof(T).Name + ": " + e.GetType().Name;
        }
    }

    static void Main()
    {
        Console.WriteLine(Method<string>("text"));
        Console.WriteLine(Method<Exception>(new Exception("boom")));
        Console.WriteLine(Method<Version>(new Version(1, 2)));
        Console.WriteLine(new Holder<string>("a").Describe("a"));
        Console.WriteLine(new Holder<string>("a").Describe(new Version(3, 4)));
        Console.WriteLine(new Holder<Version>(null).Describe("b"));
        Console.WriteLine(Holder<string>.Make(1, "x").Count);
        Console.WriteLine(Holder<string>.Make(3, "y").Count);
        Console.WriteLine(Holder<Version>.Make(5, new Version(5, 6)).Count);
        try
        {
            Holder<Exception>.Make(4, new Exception("e"));
        }
        catch (ArgumentException e)
        {
            Console.WriteLine("Main: the filter said no: " + e.Message);
        }
        Console.WriteLine(Join(new List<string> { "p", "q" }));
        Console.WriteLine(Join(new List<Version> { new Version(7, 8) }));
        Console.WriteLine(new Pair<string> { First = "one", Second = 1 }.Show());
        Console.WriteLine(new Pair<Version> { First = new Version(9, 9), Second = -1 }.Show());
        Console.WriteLine(Catch<FormatException>(new FormatException("fmt")));
        Console.WriteLine(Catch<FormatException>(new ArgumentException("arg")));
        Console.WriteLine(Catch<ArgumentException>(new ArgumentNullException("p")));
        Console.WriteLine(Mixed<string, int>("k", 7));
        Console.WriteLine(Mixed<string, Measure>("m", new Measure { Count = 3, Weight = 1.5 }));
        Console.WriteLine(Mixed<Version, long>(new Version(1, 0), 123456L));
        Console.WriteLine(Mixed<Exception, Measure>(new Exception(), new Measure { Count = 12345, Weight = -2 }));
        Console.WriteLine(Mixed<string, KeyValuePair<string, int>>("kv", new KeyValuePair<string, int>("key", 5)));
        Console.WriteLine(Delegates<string>("x"));
        Console.WriteLine(Delegates<Version>("y"));
        for (int n = 0; n < 3; n++)
        {
            Console.WriteLine(new Guard<FormatException>("format guard").Run(n));
            Console.WriteLine(new Guard<ArgumentException>("argument guard").Run(n));
            Console.WriteLine(Guard<FormatException>.RunStatic(n));
            Console.WriteLine(Guard<ArgumentException>.RunStatic(n));
        }
        Console.WriteLine("counts " + Holder<string>.Count + " " + Holder<Exception>.Count + " " + Holder<Version>.Count);
    }
}
