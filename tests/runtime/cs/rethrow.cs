// rethrow (`throw;`) keeps the exception object; `throw e` throws it again; wrapping with an inner exception.
using System;

static class Rethrow
{
    static void Fail(string s) { throw new InvalidOperationException(s); }

    static void Again(string s)
    {
        try { Fail(s); }
        catch (InvalidOperationException) { Console.WriteLine("Again: rethrow " + s); throw; }
        finally { Console.WriteLine("Again: finally " + s); }
    }

    static void Wrap(string s)
    {
        try { Again(s); }
        catch (Exception e) { throw new ApplicationException("wrapped", e); }
    }

    static int Main()
    {
        Exception first = null;
        try { Again("a"); } catch (InvalidOperationException e) { first = e; Console.WriteLine("Main: " + e.Message); }
        try { throw first; } catch (InvalidOperationException e) { Console.WriteLine("same object: " + ReferenceEquals(e, first)); }
        try { Wrap("b"); }
        catch (ApplicationException e) { Console.WriteLine("Main: " + e.Message + " <- " + e.InnerException.Message); }
        for (int i = 0; i < 3; i++)
        {
            try { try { Fail("n" + i); } catch when (i != 1) { throw; } }
            catch (Exception e) { Console.WriteLine("loop " + i + ": " + e.Message); }
        }
        return 0;
    }
}
